"""Runs side by side on a page: one table of their results (a ``run`` column first) and one
plot with a line per run, filtered and averaged as a task's table is. The page is a GET of
its choices: its URL is the view, a link to share."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.reads import comparison, table_views
from runs.web import chart_choice, results_chart
from runs.web.results_views import shown_cell, view_of


def compare_context(request: HttpRequest) -> dict[str, Any]:
    """The combined table as asked, its first rows and its plot; ``problem`` says what keeps
    it from being shown (a 400)."""
    query = request.GET
    raw = query.getlist("runs")
    context: dict[str, Any] = {"runs_text": ", ".join(raw), "view": view_of(query)}
    try:
        ids = comparison.run_ids(raw)
        compared = comparison.compare(request.user, ids, query.get("task", ""))
        asked_view = view_of(query)
        results = table_views.view(compared.results, asked_view["filter"], asked_view["over"])
        asked = {k: query[k] for k in ("x", "y", "kind") if k in query}
        asked["colour"] = query.get("colour", "run")
        choice = chart_choice.choice_from(asked, results)
    except (comparison.NotComparable, table_views.BadView, chart_choice.BadChoice) as error:
        context["problem"] = f"{getattr(error, 'field', '')}: {error}"
        return context
    shown = results.rows[: settings.SIMRUN_RESULTS_ROWS_SHOWN]
    numeric = [results.numeric(c) for c in results.columns]
    context |= {
        "ids": ids,
        "tasks": compared.tasks,
        "results": results,
        "columns": results.columns,
        "rows": [[shown_cell(c, n) for c, n in zip(row, numeric, strict=True)] for row in shown],
        "shown": len(shown),
        "choice": choice,
        "plot": results_chart.draw(results, choice) if choice else None,
        "numeric_columns": [c for c in results.columns if results.numeric(c)],
        "kinds": chart_choice.KINDS.items(),
        "parameters": compared.results.parameters(),
        "link": "?"
        + urlencode(
            {"runs": ",".join(ids), **{k: v for k, v in query.items() if k != "runs" and v}}
        ),
    }
    return context


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    """Two runs or more side by side: ``runs=a,b`` (and ``task``, ``filter``, ``over``, ``x``,
    ``y``, ``colour``, ``kind``)."""
    context = compare_context(request)
    return render(
        request, "runs/compare.html", context, status=400 if "problem" in context else 200
    )
