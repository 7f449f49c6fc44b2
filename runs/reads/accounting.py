"""What the attempts of runs used and wasted of their memory, in GiB·h, beside other policies.

Counted from the observations (one per attempt, with its peak, its limit and its wall-clock
seconds) as the sizing replay counts them (``runs.planning.sizing.wastage``): used = peak × time,
over-sized = (limit − peak) × time, a kill for memory = limit × time to the kill. The
counterfactual is what each policy of ``runs.planning.planner.COUNTERFACTUAL`` would have allocated
a task from the same observations (kept in its plan): its clean attempts replayed at that
allocation (one below the peak would have been killed there).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from runs.models import Observation, Run, Task
from runs.planning.sizing import Wastage, wastage
from runs.reads import run_reads

GIB = 2**30
WEEKS_SHOWN = 8
"""How many weeks the summary of a task type goes back by default."""


@dataclass(frozen=True)
class Attempted:
    """One attempt as the accounting needs it: GiB of its peak and limit, seconds, kill."""

    peak_gb: float
    limit_gb: float
    seconds: float
    killed: bool

    @classmethod
    def of(cls, row: Observation | Mapping[str, Any]) -> Attempted:
        values = row if isinstance(row, Mapping) else vars(row)
        return cls(
            peak_gb=(values["peak_bytes"] or 0) / GIB,
            limit_gb=(values["limit_bytes"] or 0) / GIB,
            seconds=values["seconds"] or 0.0,
            killed=bool(values["oom"]),
        )

    def wastage(self) -> Wastage:
        return wastage(
            peak_gb=self.peak_gb, limit_gb=self.limit_gb, seconds=self.seconds, killed=self.killed
        )

    def at(self, allocation_gb: float) -> Wastage | None:
        """This attempt had it been given ``allocation_gb``; None for a kill (peak unknown)."""
        if self.killed:
            return None
        killed = allocation_gb < self.peak_gb
        return wastage(
            peak_gb=self.peak_gb, limit_gb=allocation_gb, seconds=self.seconds, killed=killed
        )


@dataclass
class Usage:
    """The memory use of some attempts and, by policy, what it would have been."""

    wastage: Wastage = field(default_factory=Wastage)
    attempts: int = 0
    kills: int = 0
    counterfactual: dict[str, Wastage] = field(default_factory=dict)
    would_be_killed: dict[str, int] = field(default_factory=dict)

    def add(self, attempt: Attempted, allocations: Mapping[str, float]) -> None:
        self.wastage += attempt.wastage()
        self.attempts += 1
        self.kills += attempt.killed
        for policy, gb in allocations.items():
            replayed = attempt.at(gb)
            if replayed is None:
                continue
            self.counterfactual[policy] = self.counterfactual.get(policy, Wastage()) + replayed
            killed = int(replayed.under_gbh > 0)
            self.would_be_killed[policy] = self.would_be_killed.get(policy, 0) + killed

    def as_dict(self) -> dict[str, Any]:
        """The figures as the API shows them."""
        return {
            **figures(self.wastage),
            "attempts": self.attempts,
            "kills": self.kills,
            "counterfactual": {
                policy: {
                    **figures(w),
                    "attempts_killed": self.would_be_killed.get(policy, 0),
                }
                for policy, w in self.counterfactual.items()
            },
        }


def figures(w: Wastage) -> dict[str, float]:
    """GiB·h rounded to a tenth of a GiB·s, and the memory allocation quality."""
    return {
        "used_gbh": round(w.used_gbh, 7),
        "over_gbh": round(w.over_gbh, 7),
        "under_gbh": round(w.under_gbh, 7),
        "wasted_gbh": round(w.wasted_gbh, 7),
        "maq": round(w.maq, 3),
    }


@dataclass
class RunUsage:
    """A run's memory use in all and by task, with what each task was and would be given."""

    total: Usage
    tasks: dict[str, Usage]
    allocated: dict[str, dict[str, float]]
    """By task: the plan's memory per pod and each policy's (``counterfactual_gb``)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.total.as_dict(),
            "tasks": {
                task_id: {**usage.as_dict(), "allocated_gb": self.allocated[task_id]}
                for task_id, usage in self.tasks.items()
            },
        }


def allocations(plan: Mapping[str, Any]) -> dict[str, float]:
    """What a task was given per pod (``plan``) and what each policy would have given it."""
    return {"plan": plan.get("memory_gb", 0.0), **plan.get("counterfactual_gb", {})}


def run_usage(run: Run, tasks: Iterable[Task] | None = None) -> RunUsage:
    """The memory use of a run's attempts, by task: one query, two without its tasks."""
    known = list(run.tasks.all() if tasks is None else tasks)
    plans = {t.task_id: t.plan for t in known}
    names: dict[int | None, str] = {t.pk: t.task_id for t in known}
    total = Usage()
    by_task: dict[str, Usage] = {task_id: Usage() for task_id in plans}
    for row in run_reads.observations(run):
        task_id = names.get(row.task_id, "")
        plan = plans.get(task_id, {})
        policies = dict(plan.get("counterfactual_gb", {}))
        attempt = Attempted.of(row)
        total.add(attempt, policies)
        if task_id in by_task:
            by_task[task_id].add(attempt, policies)
    allocated = {task_id: allocations(plan) for task_id, plan in plans.items()}
    return RunUsage(total, by_task, allocated)


@dataclass(frozen=True)
class Week:
    """The memory use of one task type in one week."""

    task_type: str
    week: datetime
    usage: Usage

    def as_dict(self) -> dict[str, Any]:
        return {"task_type": self.task_type, "week": self.week.date(), **self.usage.as_dict()}


VALUES = ("task_type", "created_at", "peak_bytes", "limit_bytes", "seconds", "oom", "task__plan")
"""What the summaries read of an observation, its task's plan included."""


def _add(usage: Usage, row: Mapping[str, Any]) -> None:
    """Count an observation row (``VALUES``) with the allocations its task's plan kept."""
    plan = row.get("task__plan") or {}
    usage.add(Attempted.of(row), plan.get("counterfactual_gb", {}))


def weekly(rows: Iterable[Mapping[str, Any]]) -> list[Week]:
    """The use of observation rows (values with their task's plan) by type and week, newest
    week first: is sizing getting better?"""
    found: dict[tuple[str, datetime], Usage] = defaultdict(Usage)
    for row in rows:
        created = timezone.localtime(row["created_at"])
        monday = (created - timedelta(days=created.weekday())).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        _add(found[row["task_type"], monday], row)
    return [
        Week(task_type, week, usage)
        for (task_type, week), usage in sorted(found.items(), key=_newest_first)
    ]


def _newest_first(item: tuple[tuple[str, datetime], Usage]) -> tuple[float, str]:
    (task_type, week), _ = item
    return (-week.timestamp(), task_type)


def weekly_usage(rows: QuerySet[Observation], *, weeks: int = WEEKS_SHOWN) -> list[Week]:
    """The weekly use of the observations of the last ``weeks`` weeks: one query."""
    since = timezone.now() - timedelta(weeks=weeks)
    return weekly(rows.filter(created_at__gte=since).values(*VALUES))


def recent_usage(rows: QuerySet[Observation], *, days: int = 7) -> list[tuple[str, Usage]]:
    """The use of the observations of the last ``days`` days by task type, most wasted first."""
    since = timezone.now() - timedelta(days=days)
    found: dict[str, Usage] = defaultdict(Usage)
    for row in rows.filter(created_at__gte=since).values(*VALUES):
        _add(found[row["task_type"]], row)
    return sorted(found.items(), key=lambda item: -item[1].wastage.wasted_gbh)
