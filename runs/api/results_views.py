"""A task's results table: a page of its rows as JSON, and the whole of it as CSV or Parquet."""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from runs.api import schema
from runs.api.serializers import ResultsPageSerializer
from runs.common import store
from runs.models import Task
from runs.reads import comparison, table_views
from runs.reads import results as tables
from runs.reads.access import task_or_404
from runs.reads.capped_pages import MAX_PAGE, positive
from runs.reads.file_answers import serve_results

PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
ORDERS = ("asc", "desc")


PAGE_PARAMETERS = [
    OpenApiParameter(
        "page", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, description="from 1"
    ),
    OpenApiParameter(
        "page_size",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
        description=f"rows per page, {PAGE_SIZE} by default",
    ),
    OpenApiParameter("sort", OpenApiTypes.STR, description="a column to sort the rows by"),
    OpenApiParameter(
        "filter",
        OpenApiTypes.STR,
        description="rows where clauses hold: <column> <op> <value> joined by 'and', op "
        "one of = != < <= > >= ~ (contains); e.g. T >= 1 and method = mc",
    ),
    OpenApiParameter(
        "over",
        OpenApiTypes.STR,
        description="a parameter to average over (a seed): a row per combination of the "
        "others, with n and each numeric field's mean, std, min and max",
    ),
    OpenApiParameter("order", {"type": "string", "enum": list(ORDERS)}, description="asc"),
]
"""The parameters of a page of a table: its page, its view, its order."""


def read_or_404(task: Task) -> tables.Results:
    """The task's results table; 404 when it has none or none the service reads."""
    try:
        results = tables.read_table(store.task_folder(task.run_id, task.task_id))
    except tables.Unreadable as error:
        raise NotFound(f"task {task.task_id} has no readable results table: {error}") from None
    if results is None:
        raise NotFound(f"task {task.task_id} has no results table (out/{tables.CSV_NAME})")
    return results


def viewed(results: tables.Results, query: dict[str, str]) -> tables.Results:
    """The table as the query asks (``filter``, ``over``: ``table_views.view``);
    ``ValidationError`` naming the field."""
    try:
        return table_views.view(results, query.get("filter", ""), query.get("over", ""))
    except table_views.BadView as error:
        raise ValidationError({error.field: [str(error)]}) from None


def sort_of(query: dict[str, str], results: tables.Results) -> tuple[str | None, bool]:
    """The column to sort by and whether downwards; ``ValidationError`` naming the field."""
    column = query.get("sort") or None
    if column is not None and column not in results.columns:
        raise ValidationError({"sort": [f"no column {column[:80]!r} in the table"]})
    order = query.get("order") or "asc"
    if order not in ORDERS:
        raise ValidationError({"order": ["asc or desc"]})
    return column, order == "desc"


@extend_schema(
    summary="The results table of a task",
    description="A page of the rows of the task's out/results.csv (a row per unit, as the "
    "merge of a split task writes it), sorted by a column if asked. The table is read within "
    "the service's budgets (bytes, rows, columns): `notes` says what was left out, and the "
    "CSV download has every row.",
    parameters=[
        schema.RUN_OF_TASK,
        schema.TASK,
        *PAGE_PARAMETERS,
    ],
    responses={200: ResultsPageSerializer, 400: schema.FIELD_ERRORS, 404: schema.NOT_FOUND},
)
@api_view(["GET"])
def results_page(request: Request, run_id: str, task_id: str) -> Response:
    task = task_or_404(request.user, run_id, task_id)
    return Response(page_answer(request, read_or_404(task)))


def page_answer(request: Request, table: tables.Results) -> dict[str, Any]:
    """A page of a table as the query asks: viewed, sorted, the page's rows."""
    number = positive(request.query_params.get("page"), 1, MAX_PAGE)
    size = positive(request.query_params.get("page_size"), PAGE_SIZE, MAX_PAGE_SIZE)
    if number is None:
        raise ValidationError({"page": [f"an integer from 1 to {MAX_PAGE}"]})
    if size is None:
        raise ValidationError({"page_size": [f"an integer from 1 to {MAX_PAGE_SIZE}"]})
    results = viewed(table, request.query_params.dict())
    column, descending = sort_of(request.query_params.dict(), results)
    order = results.order(column, descending=descending)
    start = (number - 1) * size
    shown = order[start : start + size]
    if number > 1 and not shown:
        raise NotFound("no such page")
    answer = {
        "columns": [{"name": c, "numeric": results.numeric(c)} for c in results.columns],
        "count": results.count,
        "count_exact": results.complete,
        "kept": len(results.rows),
        "notes": results.notes,
        "partial": results.partial,
        "next": page_link(request, number + 1) if start + size < len(order) else None,
        "previous": page_link(request, number - 1) if number > 1 else None,
        "results": [results.typed(index) for index in shown],
    }
    return dict(ResultsPageSerializer(answer).data)


@extend_schema(
    summary="The results tables of runs side by side",
    description="The tables of two runs or more as one (a `run` column first, the rows run by "
    "run), paged, filtered, averaged and sorted as a task's table is: to compare runs.",
    parameters=[
        OpenApiParameter(
            "runs", OpenApiTypes.STR, required=True, description="run ids, comma-separated"
        ),
        OpenApiParameter(
            "task", OpenApiTypes.STR, description="the task of each (default: its one table)"
        ),
        *PAGE_PARAMETERS,
    ],
    responses={200: ResultsPageSerializer, 400: schema.FIELD_ERRORS},
)
@api_view(["GET"])
def compared_page(request: Request) -> Response:
    try:
        ids = comparison.run_ids(request.query_params.getlist("runs"))
        compared = comparison.compare(request.user, ids, request.query_params.get("task", ""))
    except comparison.NotComparable as error:
        raise ValidationError({error.field: [str(error)]}) from None
    return Response(page_answer(request, compared.results) | {"runs": ids})


def page_link(request: Request, number: int) -> str:
    url = request.build_absolute_uri()
    return (
        remove_query_param(url, "page") if number == 1 else replace_query_param(url, "page", number)
    )


@extend_schema(
    summary="The results table of a task as CSV",
    description="The whole of its out/results.csv, as a download: a header, a row per unit.",
    parameters=[schema.RUN_OF_TASK, schema.TASK],
    responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.BINARY), 404: schema.NOT_FOUND},
)
@api_view(["GET", "HEAD"])  # HEAD: whether a task has a table, without its body
def results_csv(request: Request, run_id: str, task_id: str) -> StreamingHttpResponse:
    return serve_results(task_or_404(request.user, run_id, task_id), tables.CSV_NAME)


@extend_schema(
    summary="The results table of a task as Parquet",
    description="Its out/results.parquet, written beside the CSV where the merge had pyarrow.",
    parameters=[schema.RUN_OF_TASK, schema.TASK],
    responses={
        (200, "application/vnd.apache.parquet"): OpenApiResponse(OpenApiTypes.BINARY),
        404: schema.NOT_FOUND,
    },
)
@api_view(["GET"])
def results_parquet(request: Request, run_id: str, task_id: str) -> StreamingHttpResponse:
    return serve_results(task_or_404(request.user, run_id, task_id), tables.PARQUET_NAME)
