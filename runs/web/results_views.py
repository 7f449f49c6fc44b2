"""The results table of a task on its run's page: the table (sortable, its first rows), its
downloads and its plot, each a fragment with its own URL that checks access as the page does.

The run page holds a placeholder for each done task with a results table, which loads the
table once and is kept (``hx-preserve``) across the page's live refreshes, so a table sorted
or a plot chosen stays as it is while the rest of the run moves on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse

from runs.common import store
from runs.models import FINAL_TASK_STATES, Task
from runs.reads import results as tables
from runs.reads import table_views
from runs.reads.access import task_or_404
from runs.reads.file_answers import serve_results
from runs.web import chart_choice, results_chart

CELL_CHARS = 120
"""A cell longer than this is shown cut, with an ellipsis; the downloads have all of it."""
DIGITS = 7
"""Significant digits of a number the page shows that has more (a mean's 0.9583333333333334):
the whole number is its cell's tooltip, the API's and the downloads'."""
ORDERS = ("asc", "desc")
VIEW_PARAMETERS = ("filter", "over")
PAGE_PARAMETERS = (*VIEW_PARAMETERS, "sort", "order", "x", "y", "colour", "kind")
"""What the run page passes on to the results section of the task its ``task`` names."""


class BadQuery(ValueError):
    """A parameter of a fragment that does not fit the table; the message names it."""


def has_results(task: Task) -> bool:
    """Whether a task shows a results section: ended (done; failed, as the merge of a sweep
    with more failures than allowed writes its table, then fails; or stopped by its run's
    end) with a table: the merge's ``out/results.csv`` or the rows of the units it finished
    (``tables.table_entry``; one that is no regular file is shown as a problem)."""
    if task.state not in FINAL_TASK_STATES:
        return False
    return tables.table_entry(store.task_folder(task.run_id, task.task_id))


def _read(task: Task, query: Any) -> tuple[tables.Results | None, str]:
    """The task's table as the query views it (``filter``, ``over``), or the problem that
    keeps it from being read; 404 when none, ``BadQuery`` for a view it cannot take."""
    try:
        results = tables.read_table(store.task_folder(task.run_id, task.task_id))
    except tables.Unreadable as error:
        return None, str(error)
    if results is None:
        raise Http404(f"task {task.task_id} has no results table")
    try:
        return table_views.view(results, view_of(query)["filter"], view_of(query)["over"]), ""
    except table_views.BadView as error:
        raise BadQuery(f"{error.field}: {error}") from None


def view_of(query: Any) -> dict[str, str]:
    """The view a query asks for: ``filter`` and ``over``, "" for none."""
    return {name: query.get(name, "").strip() for name in VIEW_PARAMETERS}


def view_choices(results: tables.Results | None, over: str) -> list[str]:
    """The parameters a table may be averaged over (those of the table before its average)."""
    if results is None:
        return []
    return results.parameters() + ([over] if results.grouped is not None else [])


def view_link(task: Task, query: Any, choice: chart_choice.Choice | None) -> str:
    """The run page's URL that opens on this view of the task's table: its filter, its axis
    and its plot's choices, as a link to share."""
    asked = {k: v for k, v in view_of(query).items() if v}
    if choice is not None:
        asked |= {"x": choice.x, "y": choice.y, "colour": choice.colour, "kind": choice.kind}
    base = reverse("runs:run-detail", args=[task.run_id])
    return f"{base}?{urlencode(asked | {'task': task.task_id})}#results-{task.task_id}"


def table_context(task: Task, results: tables.Results, query: Any) -> dict[str, Any]:
    """The first rows of the table in the order asked for (``sort``, ``order``), with the
    links that sort by each column."""
    column = query.get("sort") or None
    order = query.get("order") or "asc"
    if column is not None and column not in results.columns:
        raise BadQuery(f"sort: no column {column[:80]!r} in the table")
    if order not in ORDERS:
        raise BadQuery("order: asc or desc")
    url = reverse("runs:task-results-table", args=[task.run_id, task.task_id])
    indexes = results.order(column, descending=order == "desc")[
        : settings.SIMRUN_RESULTS_ROWS_SHOWN
    ]
    columns = []
    for name in results.columns:
        sorted_now = "descending" if order == "desc" else "ascending"
        following = "desc" if name == column and order == "asc" else "asc"
        columns.append(
            {
                "name": name,
                "numeric": results.numeric(name),
                "sorted": sorted_now if name == column else "",
                "url": f"{url}?{urlencode(view_of(query) | {'sort': name, 'order': following})}",
            }
        )
    numeric = [results.numeric(name) for name in results.columns]
    return {
        "task": task,
        "columns": columns,
        "rows": [
            [
                shown_cell(cell, is_number)
                for cell, is_number in zip(results.rows[i], numeric, strict=True)
            ]
            for i in indexes
        ],
        "shown": len(indexes),
        "kept": len(results.rows),
        "sort": column or "",
        "order": order,
    }


def shown_cell(cell: str, numeric: bool) -> tuple[str, bool, str]:
    """A cell as the table shows it, whether it is a number, and its whole text when what is
    shown is less: a number of more than ``DIGITS`` significant digits rounded, a text past
    ``CELL_CHARS`` cut with an ellipsis."""
    if numeric and len(cell) > DIGITS + 3 and "." in cell and "e" not in cell.lower():
        try:
            return f"{float(cell):.{DIGITS}g}", True, cell
        except ValueError:
            pass
    if len(cell) > CELL_CHARS:
        return cell[: CELL_CHARS - 1] + "…", numeric, cell
    return cell, numeric, ""


def plot_context(task: Task, results: tables.Results, query: Any) -> dict[str, Any]:
    """The plot asked for (``x``, ``y``, ``colour``, ``kind``), defaults for the rest, and the
    columns each choice may take."""
    try:
        choice = chart_choice.choice_from(query, results)
    except chart_choice.BadChoice as error:
        raise BadQuery(f"{error.field}: {error}") from None
    plot = results_chart.draw(results, choice) if choice else None
    return {
        "task": task,
        "view": view_of(query),
        "link": view_link(task, query, choice),
        "choice": choice,
        "plot": plot,
        "numeric_columns": [c for c in results.columns if results.numeric(c)],
        "all_columns": results.columns,
        "kinds": chart_choice.KINDS.items(),
    }


def results_context(task: Task, query: Any) -> dict[str, Any]:
    """The whole results section of a task: its figures, downloads, table and plot."""
    results, problem = _read(task, query)
    context: dict[str, Any] = {
        "task": task,
        "problem": problem,
        "results": results,
        "view": view_of(query),
        "parameters": view_choices(results, view_of(query)["over"]),
    }
    if results is None:
        return context
    folder = store.task_folder(task.run_id, task.task_id)
    try:
        parquet = tables.file_entry(folder, tables.PARQUET_NAME)
    except tables.Unreadable:
        parquet = None
    context["parquet_size"] = parquet
    context |= {"table": table_context(task, results, query)}
    context |= {"chart": plot_context(task, results, query)}
    return context


def _answer(request: HttpRequest, template: str, build: Any) -> HttpResponse:
    try:
        context = build()
    except BadQuery as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
    return render(request, template, context)


@login_required
def task_results(request: HttpRequest, run_id: str, task_id: str) -> HttpResponse:
    """A task's results section: figures, notes, downloads, the table and the plot."""
    task = task_or_404(request.user, run_id, task_id)
    return _answer(
        request, "runs/_results.html#results", lambda: results_context(task, request.GET)
    )


@login_required
def task_results_table(request: HttpRequest, run_id: str, task_id: str) -> HttpResponse:
    """The table alone, sorted as asked."""
    task = task_or_404(request.user, run_id, task_id)

    def build() -> dict[str, Any]:
        results, problem = _read(task, request.GET)
        if results is None:
            raise Http404(problem)
        return {"table": table_context(task, results, request.GET)}

    return _answer(request, "runs/_results.html#table", build)


@login_required
def task_results_plot(request: HttpRequest, run_id: str, task_id: str) -> HttpResponse:
    """The plot alone (its form stays on the page), as asked."""
    task = task_or_404(request.user, run_id, task_id)

    def build() -> dict[str, Any]:
        results, problem = _read(task, request.GET)
        if results is None:
            raise Http404(problem)
        return {"chart": plot_context(task, results, request.GET)}

    return _answer(request, "runs/_results.html#chart", build)


@login_required
def results_csv(request: HttpRequest, run_id: str, task_id: str) -> StreamingHttpResponse:
    """The whole table, the task's ``out/results.csv``, as a download."""
    return serve_results(task_or_404(request.user, run_id, task_id), tables.CSV_NAME)


@login_required
def results_parquet(request: HttpRequest, run_id: str, task_id: str) -> StreamingHttpResponse:
    """The task's ``out/results.parquet``, as a download."""
    return serve_results(task_or_404(request.user, run_id, task_id), tables.PARQUET_NAME)
