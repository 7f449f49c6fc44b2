"""What every observed key needed of its default: the evidence of the sizing prior.

A task whose key has no observation of its own is sized from how much of their defaults the
other keys needed (``runs.sizing.prior_from``): their largest clean peak and largest kill
per process. One aggregate query, whatever the number of observations.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db.models import Case, F, Max, When

from harness.tasktypes import TaskType
from runs import sizing
from runs.models import Observation
from runs.planner import DEFAULT_COMMAND_GB

GIB = 2**30
COMMAND_PREFIX = "command:"


def default_of(key: str, types: Mapping[str, TaskType]) -> float | None:
    """The default GiB per process of a key; None for a type no longer registered."""
    if key.startswith(COMMAND_PREFIX):
        return DEFAULT_COMMAND_GB
    task_type = types.get(key)
    return None if task_type is None else task_type.per_worker_gb


def prior_evidence(types: Mapping[str, TaskType]) -> dict[str, tuple[float, list[sizing.Sample]]]:
    """Every key's default and its largest need per process: its top clean peak, its top kill."""
    need = Case(When(oom=True, then=F("limit_bytes")), default=F("peak_bytes"))
    rows = (
        Observation.objects.values("task_type", "oom")
        .annotate(top=Max(need * 1.0 / F("processes")))
        .order_by()
    )
    found: dict[str, tuple[float, list[sizing.Sample]]] = {}
    for row in rows:
        default = default_of(row["task_type"], types)
        if default is None or row["top"] is None:
            continue
        sample = sizing.Sample(row["top"] / GIB, killed=row["oom"])
        found.setdefault(row["task_type"], (default, []))[1].append(sample)
    return found
