"""Why a task waits, as its viewer may read it: the runs that hold what it waits for are
named to their owner and to staff only (run ids of others are secret everywhere else)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runs.backends.waiting import named_runs, unnamed
from runs.models import Run, Task


def hide_holders(user: Any, tasks: Iterable[Task]) -> None:
    """Leave unnamed, in the messages of ``tasks`` as read now (never saved), the runs of
    other users than ``user`` that they name; staff read every name. One query, only when a
    message names runs."""
    if user.is_staff:
        return
    naming = [
        (task, names) for task in tasks if task.message and (names := named_runs(task.message))
    ]
    if not naming:
        return
    every = set().union(*(names for _, names in naming))
    mine = set(Run.objects.filter(pk__in=every, owner_id=user.pk).values_list("pk", flat=True))
    for task, _ in naming:
        task.message = unnamed(task.message, mine.__contains__)
