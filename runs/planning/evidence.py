"""What every observed key needed of its default: the evidence of the sizing prior.

A task whose key has no observation of its own is sized from how much of their defaults the
other keys needed (``runs.planning.sizing.prior_from``): their largest clean peak and largest kill
per process. One query, whose cost on PostgreSQL does not grow with the observations.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import connection
from django.db.models import Case, F, FloatField, Max, When
from django.db.models.functions import Cast

from harness.sweep import SWEEP_TYPE
from harness.tasktypes import TaskType
from runs.models import Observation
from runs.planning import sizing_base
from runs.planning.planner import DEFAULT_COMMAND_GB, SWEEP_PREFIX

GIB = 2**30
COMMAND_PREFIX = "command:"


def default_of(key: str, types: Mapping[str, TaskType]) -> float | None:
    """The default GiB per process of a key; None for a type no longer registered."""
    if key.startswith(COMMAND_PREFIX):
        return DEFAULT_COMMAND_GB
    task_type = types.get(SWEEP_TYPE if key.startswith(SWEEP_PREFIX) else key)
    return None if task_type is None else task_type.per_worker_gb


def prior_evidence(
    types: Mapping[str, TaskType],
) -> dict[str, tuple[float, list[sizing_base.Sample]]]:
    """Every key's default and its largest need per process: its top clean peak, its top kill."""
    found: dict[str, tuple[float, list[sizing_base.Sample]]] = {}
    for task_type, oom, top in top_needs():
        default = default_of(task_type, types)
        if default is None or top is None:
            continue
        sample = sizing_base.Sample(top / GIB, killed=oom)
        found.setdefault(task_type, (default, []))[1].append(sample)
    return found


def top_needs() -> list[tuple[str, bool, float | None]]:
    """Each key's and kill's (clean or killed) largest need per process, in bytes.

    On PostgreSQL from the index of migration 0014: a recursive query steps from one key and
    kill to the next and reads the top need at the end of each one's range, so its cost
    grows with the keys, not with the observations. Elsewhere one aggregate reads them all.
    """
    if connection.vendor != "postgresql":
        return aggregated_needs()
    with connection.cursor() as cursor:
        cursor.execute(TOP_NEEDS)
        rows: list[tuple[str, bool, float | None]] = cursor.fetchall()
    return rows


def aggregated_needs() -> list[tuple[str, bool, float | None]]:
    """What ``top_needs`` gives, aggregated over every observation: any database."""
    need = Case(When(oom=True, then=F("limit_bytes")), default=F("peak_bytes"))
    rows = (
        Observation.objects.values_list("task_type", "oom")
        .annotate(top=Max(Cast(need, FloatField()) / F("processes")))
        .order_by()
    )
    return list(rows)


def _top_needs_sql() -> str:
    table = Observation._meta.db_table
    need = "((CASE WHEN oom THEN limit_bytes ELSE peak_bytes END)::float8 / processes)"
    return (
        "WITH RECURSIVE keys AS ("
        f"(SELECT task_type, oom FROM {table} ORDER BY task_type, oom LIMIT 1) "
        "UNION ALL SELECT later.task_type, later.oom FROM keys CROSS JOIN LATERAL "
        f"(SELECT task_type, oom FROM {table} seen "
        "WHERE (seen.task_type, seen.oom) > (keys.task_type, keys.oom) "
        "ORDER BY seen.task_type, seen.oom LIMIT 1) later) "
        f"SELECT task_type, oom, (SELECT MAX({need}) FROM {table} seen "
        "WHERE seen.task_type = keys.task_type AND seen.oom = keys.oom) FROM keys"
    )


TOP_NEEDS = _top_needs_sql()
