"""A task of a run: its attempts, its logs (tail or follow) and its output files."""

from __future__ import annotations

from django.http import HttpResponseBase
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from runs.api import schema
from runs.api.serializers import (
    LogSerializer,
    LogTextSerializer,
    OutputSerializer,
    TaskSerializer,
)
from runs.common import store
from runs.reads import task_files, task_logs
from runs.reads.access import task_or_404
from runs.reads.file_answers import serve_output
from runs.reads.task_files import IMAGE_TYPES, MAX_LOG_TAIL_LINES

MAX_OFFSET = 2**53
LISTING_CUT = "Simrun-Listing-Cut"
"""The header of a list of outputs that is incomplete, saying why (too deep, too many)."""


@extend_schema(
    summary="A task",
    description="The task with its plan and why, its attempts and its progress by now.",
    parameters=[schema.RUN_OF_TASK, schema.TASK],
    responses={200: TaskSerializer, 404: schema.NOT_FOUND},
)
@api_view(["GET"])
def task_detail(request: Request, run_id: str, task_id: str) -> Response:
    task = task_or_404(request.user, run_id, task_id)
    task.units_now = task_files.units_now(task)  # type: ignore[attr-defined]
    return Response(TaskSerializer(task).data)


@extend_schema(
    summary="The logs of a task",
    description="One log per attempt of each of its pods (processes), oldest first.",
    parameters=[schema.RUN_OF_TASK, schema.TASK],
    responses={200: LogSerializer(many=True), 404: schema.NOT_FOUND},
)
@api_view(["GET"])
def log_list(request: Request, run_id: str, task_id: str) -> Response:
    task = task_or_404(request.user, run_id, task_id)
    return Response(LogSerializer(task_logs.task_logs(task, tail_lines=1), many=True).data)


def _int_param(request: Request, name: str, maximum: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 15 or int(raw) > maximum:
        raise ValidationError({name: [f"an integer from 0 to {maximum}"]})
    return int(raw)


@extend_schema(
    summary="Read a log",
    description="The last `tail` lines of a log, or what follows byte `offset`. To follow a "
    "running log, pass the `offset` of each answer to the next request until `running` is "
    "false and no text comes.",
    parameters=[
        schema.RUN_OF_TASK,
        schema.TASK,
        schema.LOG,
        OpenApiParameter(
            "tail",
            {"type": "integer", "minimum": 1, "maximum": MAX_LOG_TAIL_LINES},
            description=f"lines from the end (default {task_logs.DEFAULT_TAIL})",
        ),
        OpenApiParameter(
            "offset",
            {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
            description="the byte to read from",
        ),
    ],
    responses={200: LogTextSerializer, 400: schema.FIELD_ERRORS, 404: schema.NOT_FOUND},
)
@api_view(["GET"])
def log_text(request: Request, run_id: str, task_id: str, name: str) -> Response:
    task = task_or_404(request.user, run_id, task_id)
    tail = _int_param(request, "tail", MAX_LOG_TAIL_LINES)
    offset = _int_param(request, "offset", MAX_OFFSET)
    if tail == 0:
        raise ValidationError({"tail": [f"an integer from 1 to {MAX_LOG_TAIL_LINES}"]})
    text = task_logs.read_log(task, name, tail=tail, offset=offset)
    if text is None:
        raise NotFound(f"task {task_id} has no log {name!r}")
    return Response(LogTextSerializer(text).data)


@extend_schema(
    summary="The outputs of a task",
    description="The files of its out/ directory. The walk is bounded (SIMRUN_WALK_DEPTH "
    "folders down, SIMRUN_WALK_ENTRIES entries looked at, 500 files listed): a list that is "
    'not whole says why in its Simrun-Listing-Cut header ("too deep: …", "too many: …").',
    parameters=[schema.RUN_OF_TASK, schema.TASK],
    responses={200: OutputSerializer(many=True), 404: schema.NOT_FOUND},
)
@api_view(["GET"])
def output_list(request: Request, run_id: str, task_id: str) -> Response:
    task = task_or_404(request.user, run_id, task_id)
    listing = task_files.output_files(store.task_folder(task.run_id, task.task_id))
    rows = [
        {
            "path": f.shown,
            "size": f.size,
            "is_image": f.is_image,
            "inline": f.inline,
            "url": request.build_absolute_uri(
                reverse("api-output-file", args=[task.run_id, task.task_id, f.path])
            )
            if f.linkable
            else None,
        }
        for f in listing.files
    ]
    response = Response(OutputSerializer(rows, many=True).data)
    if listing.cut:
        response[LISTING_CUT] = listing.cut
    return response


@extend_schema(
    summary="An output file",
    description="A file of the task's out/: images as themselves, texts as plain text, "
    "anything else as a download.",
    parameters=[
        schema.RUN_OF_TASK,
        schema.TASK,
        OpenApiParameter(
            "path", OpenApiTypes.STR, OpenApiParameter.PATH, description="relative to out/"
        ),
    ],
    responses={
        (200, media): OpenApiResponse(OpenApiTypes.BINARY)
        for media in [
            *sorted(set(IMAGE_TYPES.values())),
            "text/plain",
            "application/octet-stream",
        ]
    }
    | {404: schema.NOT_FOUND},
)
@api_view(["GET"])
def output_file(request: Request, run_id: str, task_id: str, path: str) -> HttpResponseBase:
    task = task_or_404(request.user, run_id, task_id)
    return serve_output(task.run_id, task.task_id, path)
