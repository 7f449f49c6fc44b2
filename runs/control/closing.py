"""The terminal record of a run: what it is (its tasks not final skipped, a task stopped while
it ran marked so) and writing it, compare-and-set."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs.control.states import ACTIVE_STATES, task_changes
from runs.models import FINAL_TASK_STATES, STOPPED_WHILE_IT_RAN, Run, RunState, Task, TaskState


def close_run(run: Run, tasks: list[Task], state: RunState, message: str, **update: Any) -> bool:
    """Write a run terminal, its tasks not final skipped, compare-and-set; whether it was written.

    ``update`` are further fields of the run (see ``closed``).
    """
    current = {t.task_id: TaskState(t.state) for t in tasks}
    messages = {t.task_id: t.message for t in tasks}
    changes, changed_tasks = end_writes(
        run, tasks, current, messages, state=state, message=message, **update
    )
    with transaction.atomic():
        if not Run.objects.write_if_unchanged(run, **changes):
            return False
        for pk, fields in changed_tasks.items():
            Task.objects.filter(pk=pk).update(**fields)
    return True


TaskChanges = dict[int, dict[str, Any]]
"""The fields to write of each task that changes, by primary key."""


def end_writes(
    run: Run,
    tasks: list[Task],
    states: Mapping[str, TaskState],
    messages: Mapping[str, str],
    *,
    state: RunState,
    message: str,
    **closing: Any,
) -> tuple[dict[str, Any], TaskChanges]:
    """What a run's end writes: the fields of the run (``closed``) and of its tasks, whose
    ``states`` and ``messages`` were these: not final, skipped; stopped while running, marked
    so and saying why (``stopped_messages``)."""
    stopped = stopped_tasks(states)
    messages = stopped_messages(states, messages, message)
    changes, final = closed(run=run, state=state, tasks=states, message=message, **closing)
    return changes, task_writes(tasks, final, messages, stopped, stopped_by=state)


def task_writes(
    tasks: list[Task],
    states: Mapping[str, TaskState],
    messages: Mapping[str, str],
    stopped: Collection[str] = (),
    stopped_by: str = "",
) -> TaskChanges:
    """The fields to write of each task whose state or message changes (``task_changes``); the
    ``stopped`` ones were stopped while they ran by their run's end, ``stopped_by``."""
    changed: TaskChanges = {}
    for task in tasks:
        key = task.task_id
        why = stopped_by if key in stopped else ""
        if fields := task_changes(task, states[key], messages[key], stopped_by=why):
            changed[task.pk] = fields
    return changed


def closed(
    *,
    run: Run,
    state: RunState,
    tasks: Mapping[str, TaskState],
    message: str,
    workflow_exists: bool = True,
    **update: Any,
) -> tuple[dict[str, Any], dict[str, TaskState]]:
    """The terminal record: tasks not final are skipped, the node is to release.

    Returns the changes of the run (``update`` are further fields of it) and the states of
    its tasks. The workflow is to stop or cancel and its logs to keep, unless it is gone
    (``workflow_exists=False``) or there is none.
    """
    exists = workflow_exists and bool(update.get("workflow", run.workflow))
    changes = {
        "state": state,
        "message": message,
        "ended_at": timezone.now(),
        "pending_release": bool(update.get("reserved_node", run.reserved_node)),
        "pending_cancel": exists,
        "pending_logs": bool(update.get("workflow", run.workflow)),
        "merge_pending": {},
        "reports_pending": {},
        **update,
    }
    final = {t: s if s in FINAL_TASK_STATES else TaskState.SKIPPED for t, s in tasks.items()}
    return changes, final


def stopped_tasks(tasks: Mapping[str, TaskState]) -> set[str]:
    """The tasks a run's end stops while they run: skipped, yet they ran (their units done
    kept), so they are marked ``Task.stopped_by`` and say so in their message."""
    return {task_id for task_id, state in tasks.items() if state in ACTIVE_STATES}


def stopped_messages(
    tasks: Mapping[str, TaskState], messages: Mapping[str, str], why: str
) -> dict[str, str]:
    """The task messages of a run's end: a task it stops while running says so, and why."""
    stopped = stopped_tasks(tasks)
    return {
        task_id: f"{STOPPED_WHILE_IT_RAN}{why}" if task_id in stopped else messages[task_id]
        for task_id in tasks
    }
