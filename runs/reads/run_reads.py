"""A run's tasks, attempts, re-runs and observations, as its page and its API answer read them.

Both are polled (the page's live part every 2 s, ``simrun status --follow`` every second),
and the ORM builds and compiles each statement anew at every execution, about as long as
PostgreSQL takes to run it. These reads are each one fixed statement of one parameter, the
run's id, written here once and run through ``raw()``, which builds the same model instances.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db import connections, router
from django.db.models import Model

from runs.models import Attempt, Observation, Run, Task

RUNS, TASKS = Run._meta.db_table, Task._meta.db_table
ATTEMPTS, OBSERVATIONS = Attempt._meta.db_table, Observation._meta.db_table

TASKS_SQL = f'SELECT * FROM "{TASKS}" WHERE "run_id" = %s ORDER BY "position"'
ATTEMPTS_SQL = (
    f'SELECT * FROM "{ATTEMPTS}" WHERE "task_id" IN '
    f'(SELECT "id" FROM "{TASKS}" WHERE "run_id" = %s) ORDER BY "worker", "attempt"'
)
OBSERVATIONS_SQL = f'SELECT * FROM "{OBSERVATIONS}" WHERE "run_id" = %s ORDER BY "created_at"'
RERUNS_SQL = f'SELECT "id" FROM "{RUNS}" WHERE "rerun_of_id" = %s'
NEWEST_FIRST = ' ORDER BY "created_at" DESC'


def with_tasks(run: Run) -> Run:
    """``run`` with its tasks in spec order and each task's attempts, as ``run.tasks.all()``
    and ``task.attempts.all()`` give them after ``prefetch_related``: two statements."""
    tasks = list(Task.objects.raw(TASKS_SQL, [run.pk]))
    attempts: defaultdict[int, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.raw(ATTEMPTS_SQL, [run.pk]):
        attempts[attempt.task_id].append(attempt)
    for task in tasks:
        task.run = run
        keep_prefetched(task, "attempts", attempts[task.pk])
        for attempt in attempts[task.pk]:
            attempt.task = task
    keep_prefetched(run, "tasks", tasks)
    return run


def observations(run: Run) -> list[Observation]:
    """The observations of ``run``'s attempts, oldest first."""
    return list(Observation.objects.raw(OBSERVATIONS_SQL, [run.pk]))


def rerun_ids(user: Any, run: Run) -> list[str]:
    """The ids of the runs that re-run ``run`` that ``user`` may see, newest first: the
    rule of ``RunQuerySet.visible_to`` (their own, every run for staff) written in SQL."""
    owned = "" if user.is_staff else ' AND "owner_id" = %s'
    params = [run.pk] if user.is_staff else [run.pk, user.pk]
    with connections[router.db_for_read(Run)].cursor() as cursor:
        cursor.execute(RERUNS_SQL + owned + NEWEST_FIRST, params)
        return [row[0] for row in cursor.fetchall()]


def keep_prefetched(instance: Model, relation: str, rows: Sequence[Model]) -> None:
    """Keep ``rows`` as what ``instance.<relation>.all()`` gives, without a query: the
    queryset of the relation with its results in place, as ``prefetch_related`` keeps it."""
    queryset = getattr(instance, relation).get_queryset()
    queryset._result_cache = list(rows)
    queryset._prefetch_done = True
    if not hasattr(instance, "_prefetched_objects_cache"):
        instance._prefetched_objects_cache = {}  # type: ignore[attr-defined]
    instance._prefetched_objects_cache[relation] = queryset  # type: ignore[attr-defined]
