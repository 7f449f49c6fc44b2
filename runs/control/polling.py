"""One poll of one live run: ``runs.control.states`` decides, this module writes.

A poll maps the status of a run's workflow onto its record, compare-and-set on its
``version``; what the backend must do after it (settle an ended run, keep a live one's logs)
follows outside the transaction.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db import transaction

from runs.backends.base import Backend
from runs.control.closing import TaskChanges, end_writes, task_writes
from runs.control.log_keeping import keep_logs
from runs.control.settling import settle_run
from runs.control.states import Poll, observe, resolve_gone
from runs.models import ATTEMPT_OUTCOME_FIELDS, Attempt, Run, RunState, Task, TaskState
from runs.planning.records import task_plans

log = logging.getLogger(__name__)


def apply(run: Run, tasks: list[Task], poll: Poll) -> bool:
    """Write what a poll decided, compare-and-set; whether it was written.

    Nothing is written when nothing changed, and nothing when the run changed meanwhile (a
    cancel, another reconcile): that writer won, and the next poll starts from its record.
    """
    changes, changed_tasks = pending_writes(run, tasks, poll)
    if not changes and not changed_tasks:
        return False
    with transaction.atomic():
        return write_poll(run, tasks, poll, changes, changed_tasks)


def pending_writes(run: Run, tasks: list[Task], poll: Poll) -> tuple[dict[str, Any], TaskChanges]:
    """What a poll changes: the fields of the run and, by primary key, of its tasks."""
    changes: dict[str, Any] = {}
    if poll.merge_pending != run.merge_pending:
        changes["merge_pending"] = poll.merge_pending
    if poll.oom_kills != run.oom_kills:
        changes["oom_kills"] = poll.oom_kills
    if poll.failed_seen != run.failed_seen:
        changes["failed_seen"] = poll.failed_seen
    if poll.reports_pending != run.reports_pending:
        changes["reports_pending"] = poll.reports_pending
    if poll.attempts_seen is not None and poll.attempts_seen != run.attempts_seen:
        changes["attempts_seen"] = poll.attempts_seen
    if poll.verdict is None:
        changed_tasks = task_writes(tasks, poll.states, poll.messages)
    else:
        final, changed_tasks = end_writes(
            run,
            tasks,
            poll.states,
            poll.messages,
            state=poll.verdict,
            message=poll.message,
            workflow_exists=poll.workflow_exists,
        )
        changes.update(final)
    # A task started when its first attempt did (its process, its pod), not when a poll saw it,
    # and ended when the last of this poll's attempts did, if each of them knows its end.
    ends: dict[int, list[datetime | None]] = defaultdict(list)
    for attempt in poll.attempts:
        found = changed_tasks.get(attempt.task_id, {})
        start = attempt.started_at
        if start is not None and "started_at" in found and start < found["started_at"]:
            found["started_at"] = start
        ends[attempt.task_id].append(attempt.ended_at)
    for pk, known in ends.items():
        found = changed_tasks.get(pk, {})
        if "ended_at" in found and None not in known:
            end = min(found["ended_at"], max(e for e in known if e is not None))
            found["ended_at"] = max(end, found.get("started_at", end))
    return changes, changed_tasks


def write_poll(
    run: Run,
    tasks: list[Task],
    poll: Poll,
    changes: dict[str, Any],
    changed_tasks: TaskChanges,
) -> bool:
    """The writes of a poll, inside the caller's transaction; whether the run was unchanged."""
    if not Run.objects.write_if_unchanged(run, **changes):
        return False
    for pk, fields in changed_tasks.items():
        Task.objects.filter(pk=pk).update(**fields)
    if poll.attempts:
        Attempt.objects.bulk_create(
            poll.attempts,
            update_conflicts=True,
            unique_fields=["task", "worker", "attempt"],
            update_fields=[*ATTEMPT_OUTCOME_FIELDS, "ended_at"],  # a running row's end
        )
    for task in tasks:
        for name, value in changed_tasks.get(task.pk, {}).items():
            setattr(task, name, value)
    return True


def reconcile_run(
    run: Run, tasks: list[Task], *, backend: Backend, now: float | None = None
) -> bool:
    """Bring the record of one live run up to date with the backend; whether it changed.

    A run still submitting is its submission's; a terminal one only has its pending work
    retried (Ruling 25).
    """
    if run.state in {RunState.LEARNING, RunState.SUBMITTING}:
        return False
    if run.ended:
        return settle_run(run, tasks, backend=backend)
    poll = poll_run(run, tasks, backend=backend, now=now)
    written = apply(run, tasks, poll)
    follow_up(run, tasks, written=written, backend=backend)
    return written


def poll_run(run: Run, tasks: list[Task], *, backend: Backend, now: float | None = None) -> Poll:
    """What a poll of a running run decides from its workflow's status; writes nothing.

    A running record without a workflow name was written before names were stored, and fails.
    """
    now = time.time() if now is None else now
    if not run.workflow:
        message = "the record has no workflow name: it was written before names were stored"
        states = {t.task_id: TaskState(t.state) for t in tasks}
        messages = {t.task_id: t.message for t in tasks}
        poll = Poll(states, messages, {}, run.oom_kills, run.failed_seen)
        poll.verdict, poll.message, poll.workflow_exists = RunState.FAILED, message, False
        return poll
    try:
        status = backend.status(run.workflow)
    except KeyError:
        return resolve_gone(run, tasks, now)
    return observe(run, tasks, task_plans(tasks), status, now)


def follow_up(run: Run, tasks: list[Task], *, written: bool, backend: Backend) -> bool:
    """The backend's side of a written poll: settle a run it ended, keep the logs of a live one.

    Returns whether a log is still owed: a read that failed, to try again at the next pass.
    """
    if not run.ended:
        return not keep_logs(run, tasks, backend=backend)
    if written:
        settle_run(run, tasks, backend=backend)
    return False
