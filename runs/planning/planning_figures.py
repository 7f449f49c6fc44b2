"""What the planner would size each task type with now, from the same observations it reads.

The observations are read as a submission reads them (``runs.planning.submission.observed_peaks``
and
``runs.planning.evidence.prior_evidence``), in two queries however many types are registered.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.tasktypes import TaskType, registered_types
from runs.planning.evidence import prior_evidence
from runs.planning.planner import per_worker_memory, prior_of
from runs.planning.spec import TaskSpec
from runs.planning.submission import observed_peaks


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


def planning_figures() -> list[PlanningFigure]:
    """The planning figure of every registered task type, by name (not the stand-ins of the
    types runs' sources ship: their kind and defaults are their sources')."""
    types = registered_types()
    peaks = observed_peaks(set(types))
    evidence = prior_evidence(types)
    figures = []
    for name, task_type in sorted(types.items()):
        observed = peaks.get(name, [])
        prior = prior_of(name, evidence)
        sized = per_worker_memory(TaskSpec(type=name), task_type, observed, prior)
        figures.append(
            PlanningFigure(
                task_type=task_type,
                observations=len(observed),
                oom_kills=sum(o.oom for o in observed),
                per_worker_gb=sized.gb,
                why=sized.why,
            )
        )
    return figures
