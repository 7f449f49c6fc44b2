"""Writing a run terminal, with its tasks, compare-and-set."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from runs.control.states import closed, stopped_messages, stopped_tasks, task_changes
from runs.models import Run, RunState, Task, TaskState


def close_run(run: Run, tasks: list[Task], state: RunState, message: str, **update: Any) -> bool:
    """Write a run terminal, its tasks not final skipped, compare-and-set; whether it was written.

    ``update`` are further fields of the run (see ``closed``).
    """
    current = {t.task_id: TaskState(t.state) for t in tasks}
    messages = stopped_messages(current, {t.task_id: t.message for t in tasks}, message)
    stopped = stopped_tasks(current)
    changes, states = closed(run=run, state=state, tasks=current, message=message, **update)
    with transaction.atomic():
        if not Run.objects.write_if_unchanged(run, **changes):
            return False
        for task in tasks:
            key = task.task_id
            if fields := task_changes(task, states[key], messages[key], stopped=key in stopped):
                Task.objects.filter(pk=task.pk).update(**fields)
    return True
