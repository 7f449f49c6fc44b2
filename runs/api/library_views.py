"""What runs learn from and bring along: observations, task types, source snapshots."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from runs.api import schema
from runs.api.pagination import CappedPagination
from runs.api.parsers import ARCHIVE_PARSERS
from runs.api.serializers import ObservationSerializer, SnapshotSerializer, TaskTypeSerializer
from runs.models import Observation, Snapshot
from runs.planning.planning_figures import planning_figures
from runs.planning.snapshots import SnapshotError, save_snapshot
from runs.reads import accounting
from runs.reads.access import visible_observations

if TYPE_CHECKING:
    from _typeshed import SupportsRead


@extend_schema_view(
    list=extend_schema(
        summary="Observations",
        description="What the workers of your runs measured (staff: all), newest first.",
        parameters=[
            OpenApiParameter("task_type", OpenApiTypes.STR, description="only of this type")
        ],
        responses=schema.pages_of(ObservationSerializer),
    )
)
class ObservationViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[Observation]):
    serializer_class = ObservationSerializer
    pagination_class = CappedPagination

    def get_queryset(self):  # type: ignore[no-untyped-def]
        rows = visible_observations(self.request.user)
        task_type = self.request.query_params.get("task_type")
        if task_type:
            if "\x00" in task_type:
                raise ValidationError({"task_type": ["a task type name"]})
            rows = rows.filter(task_type=task_type)
        return rows


@extend_schema(
    summary="Task types",
    description="Every registered task type with the memory per process a new task of it "
    "would be planned with now, and why.",
    responses={200: TaskTypeSerializer(many=True)},
)
@api_view(["GET"])
def task_type_list(request: Request) -> Response:
    return Response(TaskTypeSerializer(planning_figures(), many=True).data)


@extend_schema_view(
    list=extend_schema(
        summary="Your source snapshots",
        responses=schema.pages_of(SnapshotSerializer),
    ),
    retrieve=extend_schema(
        summary="A source snapshot",
        parameters=[schema.path("id", schema.DIGEST, "the sha256 of the archive")],
        responses={200: SnapshotSerializer, 404: schema.NOT_FOUND},
    ),
)
class SnapshotViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Snapshot]
):
    """Source trees uploaded as tar.gz, named in a spec's ``sources`` by their sha256."""

    serializer_class = SnapshotSerializer
    pagination_class = CappedPagination
    parser_classes = ARCHIVE_PARSERS
    lookup_field = "digest"
    lookup_url_kwarg = "pk"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Snapshot]:
        assert isinstance(self.request.user, User)  # IsAuthenticated: only users get here
        return Snapshot.objects.filter(owner=self.request.user).order_by("-created_at", "-id")

    @extend_schema(
        summary="Upload a source snapshot",
        description="The body is a tar.gz of a source tree (its root at the archive's root). "
        "It is kept once under its sha256, which is the id to name in a spec's sources.",
        parameters=[
            OpenApiParameter("name", OpenApiTypes.STR, description="a label, e.g. the folder")
        ],
        request={"application/gzip": OpenApiTypes.BINARY},
        responses={
            200: SnapshotSerializer,
            201: SnapshotSerializer,
            400: schema.FIELD_ERRORS,
        },
    )
    def create(self, request: Request) -> Response:
        name = request.query_params.get("name", "")
        if "\x00" in name:
            raise ValidationError({"name": ["a label without NUL characters"]})
        # An empty body never reaches the parsers: DRF gives an empty mapping instead.
        # The archive parsers hand over the request's stream (DRF's stub knows only mappings).
        archive = (
            cast("SupportsRead[bytes]", request.data)
            if hasattr(request.data, "read")
            else io.BytesIO()
        )
        assert isinstance(request.user, User)  # IsAuthenticated: only users get here
        try:
            snapshot, created = save_snapshot(owner=request.user, archive=archive, name=name)
        except SnapshotError as error:
            raise ValidationError({"archive": [str(error)]}) from None
        return Response(
            SnapshotSerializer(snapshot).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


@extend_schema(
    summary="Memory use by task type and week",
    description="GiB·h the observed attempts of your runs (staff: all) used, over-sized and "
    "lost to kills, per task type and week, newest first, with what Kubernetes' VPA "
    "recommender's allocations would have wasted on the same attempts: is sizing getting "
    "better, and what did it save?",
    parameters=[
        OpenApiParameter("task_type", OpenApiTypes.STR, description="only of this type"),
        OpenApiParameter("weeks", OpenApiTypes.INT, description="how far back (1-52, 8)"),
    ],
    responses={200: OpenApiTypes.OBJECT, 400: schema.FIELD_ERRORS},
)
@api_view(["GET"])
def usage_list(request: Request) -> Response:
    weeks = request.query_params.get("weeks", str(accounting.WEEKS_SHOWN))
    if not weeks.isdigit() or not 1 <= int(weeks) <= 52:
        raise ValidationError({"weeks": ["a whole number of weeks from 1 to 52"]})
    rows = visible_observations(request.user)
    task_type = request.query_params.get("task_type")
    if task_type:
        if "\x00" in task_type:
            raise ValidationError({"task_type": ["a task type name"]})
        rows = rows.filter(task_type=task_type)
    found = accounting.weekly_usage(rows, weeks=int(weeks))
    return Response({"results": [week.as_dict() for week in found]})
