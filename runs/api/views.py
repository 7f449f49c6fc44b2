"""The runs API: submit a specification, list and read runs, cancel one.

Views validate, call one domain function and return; a user reaches only their own runs
(staff every run) and another user's run is a 404, as an unknown one.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import (
    APIException,
    PermissionDenied,
    UnsupportedMediaType,
    ValidationError,
)
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response

from harness.tasktypes import task_types
from runs.api import schema, spec_schema  # noqa: F401 - registers RunSpec's schema
from runs.api.pagination import CappedPagination
from runs.api.parsers import SPEC_MEDIA_TYPES, SPEC_PARSERS, Undeclared
from runs.api.serializers import (
    ErrorSerializer,
    RunDetailSerializer,
    RunLabelsSerializer,
    RunSerializer,
    run_detail_serializer,
)
from runs.common.errors import field_sentences
from runs.common.kept import Kept
from runs.common.labels import kept_tags
from runs.control import cancelling
from runs.models import Run, RunState
from runs.planning.reruns import submit_rerun
from runs.planning.spec import RunSpec, SpecError, validate_spec
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from runs.reads.access import (
    run_or_404,
    visible_runs,
    with_progress,
    with_tasks_for,
)
from runs.reads.listed_json import listed_page
from runs.reads.listing import Listing
from runs.reads.run_filters import RunFilters, filter_values
from runs.reads.run_reads import rerun_ids
from runs.reads.settled import KEPT, shown
from runs.reads.task_files import attach_progress


def refused(request: Request, body: bytes, error: SpecError) -> APIException:
    """The answer to a spec that is refused: 400 with its problems, or 415 for a body sent as
    none of a spec's types that does not read as one (an image, a form)."""
    if isinstance(body, Undeclared) and set(error.errors) == {"spec"}:
        declared = request.content_type or "no Content-Type"
        return UnsupportedMediaType(
            declared,
            detail=f"the body ({declared}) is no run specification: "
            f"{' '.join(error.errors['spec'])}; send YAML or JSON, as "
            f"{', '.join(SPEC_MEDIA_TYPES)} or any type if it reads as one",
        )
    return ValidationError(error.errors)


def submitted_text(body: bytes) -> str:
    """A spec body as the text to keep for Edit and re-run (``parse_spec`` read it as UTF-8)."""
    return body.decode("utf-8", errors="replace")


CANNOT_RUN = OpenApiResponse(
    ErrorSerializer,
    description="this service cannot start such a run as it is set up: refused, the fix named",
)


QUEUE_FULL = OpenApiResponse(
    ErrorSerializer,
    description="you have SIMRUN_USER_QUEUED_RUNS runs that have not ended: refused, the bound "
    "named",
)


def created(request: Request, run: Run) -> Response:
    """The answer to a submission: 201 with the run, or 202 while it is ``learning`` (the
    worker learns the types its sources ship, then plans it)."""
    detail = run_detail(request, run.id)
    learning = run.state == RunState.LEARNING
    return Response(detail, status=202 if learning else status.HTTP_201_CREATED)


LEARNING = OpenApiResponse(
    RunDetailSerializer,
    description="accepted: the run is learning the task types its sources ship (in the "
    "worker, as your task user), without tasks until it is planned",
)


RESUME_OF = OpenApiParameter(
    "resume_of",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    pattern=schema.RUN_ID,
    description="an ended run of yours to resume: what it finished is reused, by task key",
)


def resume(user: User, source_id: str, body: bytes) -> Run:
    """Resume the run ``source_id`` with the spec of ``body`` (empty: its own spec). An
    unknown run, another user's (for all but staff) or one not ended is a ``SpecError``
    under ``resume_of``."""
    source = visible_runs(user).filter(pk=source_id).first()
    if source is None:
        raise SpecError({"resume_of": [f"no run {source_id!r} of yours"]})
    types = task_types()
    if body.strip():
        spec, text = parse_spec(body, types=types), submitted_text(body)
    else:
        spec, text = validate_spec(source.spec, types=types), None
    return submit_rerun(source=source, spec=spec, actor=user, text=text, resume=True)


def valid_filters(request: Request) -> dict[str, Any]:
    """The validated filters of a request; a 400 naming the bad parameter otherwise."""
    values, errors = filter_values(request.query_params)
    if errors:
        raise ValidationError(errors)
    return values


ANSWERS: Kept[dict[str, Any]] = Kept(KEPT)
"""The API answers of settled runs."""


def run_detail(request: Request, run_id: str) -> dict[str, Any]:
    """The answer of a visible run: its tasks, attempts, progress by now, visible re-runs."""
    run = run_or_404(request.user, run_id)
    return detail_of(request, run, rerun_ids(request.user, run))


def detail_of(request: Request, run: Run, reruns: list[str]) -> dict[str, Any]:
    """The answer of ``run``, read by ``request``'s user, whose re-runs are ``reruns``."""
    run = with_tasks_for(request.user, run)
    attach_progress(run, list(run.tasks.all()))
    run.rerun_ids = reruns  # type: ignore[attr-defined]
    return dict(run_detail_serializer().to_representation(run))


@extend_schema_view(
    list=extend_schema(
        summary="List runs",
        description="Your runs (staff: every run), newest first, filtered and paginated.",
        parameters=[RunFilters],
        responses=schema.pages_of(RunSerializer),
    ),
    retrieve=extend_schema(
        summary="A run",
        description="The run with its tasks, their plans (and why), attempts and progress.",
        parameters=[schema.RUN],
        responses={200: RunDetailSerializer, 404: schema.NOT_FOUND},
    ),
)
class RunViewSet(viewsets.GenericViewSet[Run]):
    """Runs: submit a specification (JSON or YAML), list your runs, follow one, cancel it."""

    serializer_class = RunSerializer
    parser_classes = SPEC_PARSERS
    pagination_class = CappedPagination
    lookup_value_regex = "[^/]+"

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return visible_runs(self.request.user)

    def list(self, request: Request) -> HttpResponse:
        listing = Listing.of(request.user, valid_filters(request))
        assert isinstance(self.paginator, CappedPagination)
        rows = self.paginator.paginate(request, partial(listed_page, listing, now=timezone.now()))
        if request.accepted_renderer.format == "json":
            return self.paginator.json_response(rows)
        return self.get_paginated_response([json.loads(row) for row in rows])

    def retrieve(self, request: Request, pk: str) -> Response:
        """A run; a settled run's answer is written once per process (``runs.reads.settled``),
        its re-runs read at every request (a re-run counts no version of this run up)."""
        run = run_or_404(request.user, pk)
        reruns = rerun_ids(request.user, run)
        answer = shown(ANSWERS, run, request, lambda: detail_of(request, run, reruns))
        return Response({**answer, "reruns": reruns})

    @extend_schema(
        summary="Submit a run",
        description="The body is a run specification (docs/run-spec.md) as YAML or JSON: "
        "application/json, application/yaml, application/x-yaml, text/yaml or text/plain, "
        "or any other Content-Type (none, curl's application/x-www-form-urlencoded) when "
        "the body reads as YAML or JSON; one that does not is a 415. A bad one is a 400 "
        "with every problem by the path of its field. With resume_of the run resumes that "
        "ended run (docs/resume.md): a re-run of it that reuses every task and unit it "
        "finished; without a body, of its spec as it was.",
        parameters=[RESUME_OF],
        request={
            "application/json": RunSpec,
            "application/yaml": RunSpec,
            "text/yaml": RunSpec,
            "text/plain": RunSpec,
        },
        responses={
            201: RunDetailSerializer,
            202: LEARNING,
            400: schema.FIELD_ERRORS,
            415: schema.UNSUPPORTED,
            429: QUEUE_FULL,
            503: CANNOT_RUN,
        },
        examples=[
            OpenApiExample(
                "A sweep and its statistics",
                value=schema.EXAMPLE_SPEC,
                request_only=True,
                media_type="application/json",
            )
        ],
    )
    def create(self, request: Request) -> Response:
        # An empty body never reaches the parsers: DRF gives an empty mapping instead.
        body = request.data if isinstance(request.data, bytes) else b""
        try:
            assert isinstance(request.user, User)  # IsAuthenticated: only users get here
            if resume_of := request.query_params.get("resume_of"):
                run = resume(request.user, resume_of, body)
            else:
                spec = parse_spec(body, types=task_types())
                run = create_run(spec=spec, owner=request.user, text=submitted_text(body))
        except SpecError as error:
            raise refused(request, body, error) from None
        return created(request, run)

    @extend_schema(
        summary="Cancel a run",
        description="Writes the run cancelled at once; the backend's pods are ended after.",
        request=None,
        parameters=[schema.RUN],
        responses={
            202: RunSerializer,
            404: schema.NOT_FOUND,
            409: schema.CONFLICT,
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        run = get_object_or_404(with_progress(visible_runs(request.user)), pk=pk)
        cancelling.request_cancel(run)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Tag a run and note on it",
        description="Sets the run's tags (find it by runs?tag=...) and note; a field not "
        "given stays as it is. Its owner's, or staff's.",
        request=RunLabelsSerializer,
        parameters=[schema.RUN],
        responses={200: RunLabelsSerializer, 400: schema.FIELD_ERRORS, 404: schema.NOT_FOUND},
    )
    @action(detail=True, methods=["post"], parser_classes=[JSONParser])
    def labels(self, request: Request, pk: str) -> Response:
        run = run_or_404(request.user, pk)
        if run.owner_id != request.user.pk and not request.user.is_staff:
            raise PermissionDenied("only its owner tags a run or notes on it")
        given = RunLabelsSerializer(data=request.data)
        if not given.is_valid():
            raise ValidationError(
                {name: field_sentences(found, "tag") for name, found in given.errors.items()}
            )
        changes = dict(given.validated_data)
        if "tags" in changes:
            changes["tags"] = kept_tags(changes["tags"])
        Run.objects.filter(pk=run.pk).update(**changes)
        run.refresh_from_db(fields=["tags", "note"])
        return Response({"tags": run.tags, "note": run.note})

    @extend_schema(
        summary="Re-run a run",
        description="Submits the run's spec again as a new run of yours, linked to it "
        "(rerun_of). A body, if any, is the spec to submit instead (the old one edited).",
        request={"application/json": RunSpec, "application/yaml": RunSpec},
        parameters=[schema.RUN],
        responses={
            201: RunDetailSerializer,
            202: LEARNING,
            400: schema.FIELD_ERRORS,
            404: schema.NOT_FOUND,
            429: QUEUE_FULL,
            503: CANNOT_RUN,
        },
    )
    @action(detail=True, methods=["post"])
    def rerun(self, request: Request, pk: str) -> Response:
        source = run_or_404(request.user, pk)
        body = request.data if isinstance(request.data, bytes) else b""
        try:
            types = task_types()
            spec = parse_spec(body, types=types) if body.strip() else None
            text = submitted_text(body) if spec else None
            spec = spec or validate_spec(source.spec, types=types)
            assert isinstance(request.user, User)  # IsAuthenticated: only users get here
            run = submit_rerun(source=source, spec=spec, actor=request.user, text=text)
        except SpecError as error:
            raise refused(request, body, error) from None
        return created(request, run)
