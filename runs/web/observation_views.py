"""The observations page: per task type, the peak memory per process of past attempts against
its sizing, and the planning figure.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from runs.planning.planning_figures import evidence_figures, planning_figures
from runs.reads import accounting
from runs.reads.access import visible_observations
from runs.web.charts import observation_chart

OBSERVATIONS_CHARTED = 200


@login_required
def observations(request: HttpRequest) -> HttpResponse:
    """Per task type: peak memory per process against its sizing, and the planning figure."""
    keys = visible_observations(request.user).order_by().values_list("task_type", flat=True)
    figures = planning_figures() + evidence_figures(keys.distinct())
    by_name = {f.name: f for f in figures}
    name = request.GET.get("type") or next(
        (f.name for f in figures if f.observations), figures[0].name if figures else ""
    )
    if name not in by_name:
        raise Http404(f"no task type {name!r}")
    rows = list(visible_observations(request.user).filter(task_type=name)[:OBSERVATIONS_CHARTED])
    figure = by_name[name]
    return render(
        request,
        "runs/observations.html",
        {
            "figures": figures,
            "figure": figure,
            "observations": rows,
            "chart": observation_chart(rows[::-1], figure.per_worker_gb) if rows else "",
            "weeks": accounting.weekly_usage(
                visible_observations(request.user).filter(task_type=name)
            ),
            "last_week": accounting.recent_usage(visible_observations(request.user)),
        },
    )
