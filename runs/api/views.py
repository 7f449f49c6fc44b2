"""API views: validate, call one domain function, return."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness.tasktypes import task_types
from runs import controller
from runs.api.parsers import SPEC_PARSERS
from runs.api.serializers import RunDetailSerializer, RunSerializer
from runs.models import Run, Task
from runs.spec import SpecError, parse_spec
from runs.submission import create_run


class RunViewSet(viewsets.ReadOnlyModelViewSet[Run]):
    """Runs: submit a specification (JSON or YAML), list your runs, follow one, cancel it."""

    serializer_class = RunSerializer
    parser_classes = SPEC_PARSERS

    def get_queryset(self) -> QuerySet[Run]:
        runs = Run.objects.visible_to(self.request.user).select_related("owner")
        if self.action == "retrieve":
            runs = runs.prefetch_related(Prefetch("tasks", Task.objects.order_by("position")))
        return runs

    def get_serializer_class(self) -> type[RunSerializer]:
        return RunDetailSerializer if self.action in {"retrieve", "create"} else RunSerializer

    def create(self, request: Request) -> Response:
        try:
            # An empty body never reaches the parsers: DRF gives an empty mapping instead.
            body = request.data if isinstance(request.data, bytes) else b""
            spec = parse_spec(body, types=task_types())
            run = create_run(spec=spec, owner=request.user)
        except SpecError as error:
            raise ValidationError(error.errors) from None
        return Response(RunDetailSerializer(run).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        try:
            controller.request_cancel(run)
        except controller.Conflict as error:
            return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)
