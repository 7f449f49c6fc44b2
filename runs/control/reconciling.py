"""The pass of the control loop over the live runs.

Each step settles one run and says whether it changed anything. The loop keeps no state
that matters in memory: what a poll needs is in the record (task states, OOM kills,
``merge_pending``), so a restarted service continues where the one before stopped. No
backend call is made inside a transaction.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from runs.backends import get_backend
from runs.backends.base import Backend
from runs.common.handoff import Schedule, scheduler
from runs.control import locks, poll_memory
from runs.control.backoff import crashed, recovered
from runs.control.learning import resume_learning
from runs.control.polling import follow_up, pending_writes, poll_run, write_poll
from runs.control.settling import settle_run
from runs.control.states import Poll
from runs.control.submitting import resume_submission
from runs.control.waking import WAKE_FLAG
from runs.models import Run, RunState, Task

log = logging.getLogger(__name__)


RECONCILE_LOCK = "reconcile"
UNUSED_TASK_FIELDS = ("settings", "inputs", "command")
"""What a poll never reads of a task; not loaded for the live runs."""


def live_runs(now: datetime, backend: Backend | None = None) -> list[tuple[Run, list[Task]]]:
    """The live runs not pushed aside, with their tasks: a few queries whatever their number.

    Given a backend that signals changes, only the runs that changed are read, and of those
    the ones unchanged since their last poll (in this process, or as their rows say) are left
    out, their tasks unread (``runs.control.poll_memory``): the rest is loaded only for those
    polled, which the next pass reads again.
    """
    polled: list[str] | None = None  # the ids of the runs to poll; None: every due run
    memory = poll_memory.memory_of(backend)
    if memory is not None and backend is not None:
        live = memory.due_rows(now)
        skipped = memory.unchanged(live, backend)
        polled = [row.pk for row in live if row.pk not in skipped]
        memory.reread.update(polled)
        if not polled:
            return []  # the common pass: no query of the runs or their tasks is even built
        if not skipped:  # every due run is polled: no list of ids to send
            polled = None
    due = Run.objects.live().filter(Q(reconcile_after__isnull=True) | Q(reconcile_after__lte=now))
    found = due.defer("spec", "spec_text").order_by("created_at")
    rows = Task.objects.filter(run__in=due.values("pk"))
    if polled is not None:
        found = found.filter(pk__in=polled)
        rows = Task.objects.filter(run_id__in=polled)
    runs = list(found)
    if not runs:
        return []
    tasks: dict[str, list[Task]] = defaultdict(list)
    for task in rows.defer(*UNUSED_TASK_FIELDS).order_by("run_id", "position"):
        tasks[task.run_id].append(task)
    return [(run, tasks[run.pk]) for run in runs]


def reconcile_pass(*, backend: Backend | None = None, schedule: Schedule | None = None) -> int:
    """One pass over the live runs; the number of runs whose record changed.

    Runs go in batches: every run of a batch is polled (the backend's reads), then what the
    polls decided is written in one transaction (``_apply_batch``), so a thousand changed runs
    cost a few commits, not a thousand; then the backend's side (stop, release, logs) follows,
    outside any transaction. A run whose reconcile raises (e.g. a record that cannot be read)
    is logged and pushed aside for a while, longer each time; the pass goes on with the others.
    A submission that stopped is handed on again with ``schedule`` (``resume_submission``).
    A running run unchanged since its last poll is skipped (``live_runs``).
    """
    backend = backend or get_backend()
    schedule = schedule or scheduler()
    now = timezone.now()
    with collector_paused():
        found = live_runs(now, backend)
    memory = poll_memory.memory_of(backend)
    changed = 0
    for start in range(0, len(found), WRITE_BATCH):
        polled: list[tuple[Run, list[Task], Poll]] = []
        for run, tasks in found[start : start + WRITE_BATCH]:
            try:
                if run.state == RunState.SUBMITTING:
                    resume_submission(run, now, schedule=schedule, backend=backend)
                elif run.state == RunState.LEARNING:
                    resume_learning(run, now)
                elif run.ended:
                    changed += settle_run(run, tasks, backend=backend)
                    recovered(run)
                else:
                    polled.append((run, tasks, poll_run(run, tasks, backend=backend)))
            except Exception as error:
                crashed(run, now, error)
        written = _apply_batch(polled, now)
        went_through: list[Run] = []
        for run, tasks, _poll in polled:
            if run.pk not in written:
                continue
            try:
                owed = follow_up(run, tasks, written=written[run.pk], backend=backend)
                if memory is not None:
                    memory.owe_logs(run.pk, owed)
                recovered(run)
                went_through.append(run)
            except Exception as error:
                crashed(run, now, error)
            changed += written[run.pk]
        if memory is not None:
            memory.remember(went_through)
    return changed


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cycle collector while a pass reads what changed: the few small objects
    it makes of every live run set off collections of the whole heap, a third of a steady
    pass at 10,000 runs. Reference counting frees them all the same, and the collector takes
    what cycles they hold once it runs again."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


WRITE_BATCH = 200
"""The runs whose polls are written in one transaction."""


def _apply_batch(polled: list[tuple[Run, list[Task], Poll]], now: datetime) -> dict[str, bool]:
    """Write the polls of a batch in one transaction; whether each run was written, by id.

    Only runs with something to write enter it. Should a write raise, the transaction is
    rolled back and the runs are written one by one, each in its own: the one that raises is
    pushed aside and left out.
    """
    written = {run.pk: False for run, _tasks, _poll in polled}
    changing = [
        (run, tasks, poll, *found)
        for run, tasks, poll in polled
        if any(found := pending_writes(run, tasks, poll))
    ]
    if not changing:
        return written
    versions = {run.pk: run.version for run, *_ in changing}
    try:
        with transaction.atomic():
            for run, tasks, poll, changes, changed_tasks in changing:
                written[run.pk] = write_poll(run, tasks, poll, changes, changed_tasks)
        return written
    except Exception:
        log.exception("writing a batch of %d runs failed; writing them one by one", len(changing))
    for run, tasks, poll, changes, changed_tasks in changing:
        run.version = versions[run.pk]  # the rolled back write had counted it up
        try:
            with transaction.atomic():
                written[run.pk] = write_poll(run, tasks, poll, changes, changed_tasks)
        except Exception as error:
            del written[run.pk]
            crashed(run, now, error)
    return written


def reconcile(*, backend: Backend | None = None, schedule: Schedule | None = None) -> int | None:
    """Bring the records of the live runs up to date with the backend.

    At most one reconcile runs at a time (a lock in Redis or a file): None when another one
    holds it. A wake-up during a pass makes one more pass, so none is lost. Returns the
    number of runs whose record changed.
    """
    changed: int | None = None
    while True:
        with locks.hold(RECONCILE_LOCK) as held:
            if not held:
                return changed
            locks.lower_flag(WAKE_FLAG)
            changed = (changed or 0) + reconcile_pass(backend=backend, schedule=schedule)
        if not locks.flag_raised(WAKE_FLAG):
            return changed
