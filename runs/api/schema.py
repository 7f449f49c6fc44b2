"""Pieces of the OpenAPI description shared by the views: path parameters and error bodies."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.serializers import Serializer

from runs.api.serializers import ErrorSerializer

RUN_ID = r"^[a-z0-9]{1,16}$"
TASK_ID = r"^[a-z][a-z0-9-]{0,39}$"
LOG_NAME = r"^[^/]+-[0-9]{1,9}$"
DIGEST = r"^[0-9a-f]{64}$"
NODE = r"^[^/]{1,253}$"


def path(name: str, pattern: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name, OpenApiTypes.STR, OpenApiParameter.PATH, pattern=pattern, description=description
    )


RUN = path("id", RUN_ID, "the run's id")
RUN_OF_TASK = path("run_id", RUN_ID, "the run's id")
TASK = path("task_id", TASK_ID, "the task's id in the spec")
LOG = path("name", LOG_NAME, "<node>-<attempt>, as the list of logs names it")

FIELD_ERRORS = OpenApiResponse(
    response={
        "type": "object",
        "additionalProperties": {"type": "array", "items": {"type": "string"}},
    },
    description="what is wrong, by the path of the field (e.g. tasks.sweep.settings.n)",
)
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="no such object, or not yours")
NO_PAGE = OpenApiResponse(ErrorSerializer, description="no such page")
CONFLICT = OpenApiResponse(ErrorSerializer, description="refused in the object's state")
UNAVAILABLE = OpenApiResponse(ErrorSerializer, description="the backend did not answer")
FORBIDDEN = OpenApiResponse(ErrorSerializer, description="for staff only")
UNSUPPORTED = OpenApiResponse(
    ErrorSerializer, description="a body sent as no spec type that does not read as YAML or JSON"
)
LOCKED_OUT = OpenApiResponse(
    ErrorSerializer,
    description="too many failed logins of this user or from this address: refused, even with "
    "the right password, for the seconds of the Retry-After header",
)


def pages_of(serializer: type[Serializer[Any]]) -> dict[int, Any]:
    """The answers of a paginated list: a page of rows, a bad parameter, a page past the end."""
    return {200: serializer(many=True), 400: FIELD_ERRORS, 404: NO_PAGE}


EXAMPLE_SPEC = {
    "name": "squares-and-stats",
    "tasks": {
        "sweep": {"type": "squares", "settings": {"n": 100}, "workers": 2},
        "stats": {"type": "csv-stats", "inputs": {"table": "sweep"}},
    },
}
"""A run to submit as it is: a split task and a plugin task reading its output."""
