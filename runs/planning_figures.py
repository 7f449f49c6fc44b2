"""What the planner would size each task type with now, from the same observations it reads.

One query for every type: the latest ``OBSERVATIONS_USED`` observations per type by a window,
so the page and the API list stay constant in queries however many types are registered.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from harness.tasktypes import TaskType, task_types
from runs.models import Observation
from runs.planner import ObservedPeak, per_worker_memory
from runs.spec import TaskSpec
from runs.submission import OBSERVATIONS_USED


@dataclass(frozen=True)
class PlanningFigure:
    """The per-process memory a new task of a type would be planned with, and why."""

    task_type: TaskType
    observations: int
    oom_kills: int
    per_worker_gb: float
    why: str

    @property
    def name(self) -> str:
        return self.task_type.name

    @property
    def kind(self) -> str:
        return "split" if self.task_type.splittable else "plugin"


def latest_peaks() -> dict[str, list[ObservedPeak]]:
    """The latest observations of every task type as the planner reads them, newest first."""
    ranked = (
        Observation.objects.annotate(
            rank=Window(RowNumber(), partition_by=[F("task_type")], order_by=F("created_at").desc())
        )
        .filter(rank__lte=OBSERVATIONS_USED)
        .order_by("task_type", "rank")
    )
    peaks: dict[str, list[ObservedPeak]] = {}
    for row in ranked:
        gb = row.peak_gb_per_process
        if gb is not None:
            peaks.setdefault(row.task_type, []).append(ObservedPeak(gb, oom=row.oom))
    return peaks


def planning_figures() -> list[PlanningFigure]:
    """The planning figure of every registered task type, by name."""
    peaks = latest_peaks()
    figures = []
    for name, task_type in sorted(task_types().items()):
        observed = peaks.get(name, [])
        gb, why = per_worker_memory(TaskSpec(type=name), task_type, observed)
        figures.append(
            PlanningFigure(
                task_type=task_type,
                observations=len(observed),
                oom_kills=sum(o.oom for o in observed),
                per_worker_gb=gb,
                why=why,
            )
        )
    return figures
