"""What the planner would size each task type with now, from the same observations it reads.

The observations are read as a submission reads them (``runs.planning.submission.observed_peaks``
and
``runs.planning.evidence.prior_evidence``), in two queries however many types are registered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.sweep import SWEEP_TYPE
from harness.tasktypes import ShippedType, TaskType, registered_types, task_types
from runs.planning.evidence import COMMAND_PREFIX, prior_evidence
from runs.planning.planner import SWEEP_PREFIX, per_worker_memory, prior_of
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
    key: str = ""
    """The observations' key when it is not the type's name: a command sweep's
    ``sweep:<program>``, a command task's ``command:<run>/<task>``."""
    shipped: bool = False
    """A type some run's sources ship, known here by its stand-in."""

    @property
    def name(self) -> str:
        return self.key or self.task_type.name

    @property
    def kind(self) -> str:
        if self.key.startswith(COMMAND_PREFIX):
            return "command"
        if self.shipped:
            return "shipped"
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


def evidence_figures(keys: Iterable[str]) -> list[PlanningFigure]:
    """The planning figure of every key with evidence that is no registered type, by key: a
    type some run's sources ship (its stand-in's defaults, as the sources' are theirs), a
    command sweep's program (the ``sweep`` type's), a command task (a command's 1 GiB)."""
    registered = registered_types()
    wanted = sorted(set(keys) - set(registered) - {""})
    if not wanted:
        return []
    known = task_types()
    peaks = observed_peaks(set(wanted))
    evidence = prior_evidence(known)
    figures = []
    for key in wanted:
        command = key.startswith(COMMAND_PREFIX)
        sweep = key.startswith(SWEEP_PREFIX)
        named = known.get(SWEEP_TYPE if sweep else key)
        task_type = named if named is not None else ShippedType(name=key)
        observed = peaks.get(key, [])
        spec = TaskSpec(type=None if command else task_type.name)
        sized = per_worker_memory(
            spec, None if command else task_type, observed, prior_of(key, evidence)
        )
        figures.append(
            PlanningFigure(
                task_type=task_type,
                observations=len(observed),
                oom_kills=sum(o.oom for o in observed),
                per_worker_gb=sized.gb,
                why=sized.why,
                key=key if command or sweep else "",
                shipped=not command and not sweep and key not in registered,
            )
        )
    return figures
