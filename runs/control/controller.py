"""The controller: follows the workflows of the runs and records their end (spec/000).

Each step settles one run and says whether it changed anything: a poll maps the status of a
run's workflow onto its record (``runs.control.states`` decides, this module writes), a terminal
run's pending work is retried, a submission resumes. The controller keeps no state in
memory: what a poll needs is in the record (task states, OOM kills, ``merge_pending``), so
a restarted service continues where the one before stopped. Every write of a run is
compare-and-set on its ``version``; no backend call is made inside a transaction.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from harness.tasktypes import task_types
from runs.backends import cluster_config, get_backend
from runs.backends.base import (
    FINAL_PHASES,
    Backend,
    BackendUnavailable,
    ClusterConfig,
    TaskPlan,
    workflow_name,
)
from runs.common import store
from runs.common.errors import CannotRun
from runs.common.handoff import Schedule, after_commit, learner, scheduler, settler, waker
from runs.control import locks, observations, reuse, unchanged
from runs.control.observations import attempt_of, is_oom  # noqa: F401 (the spec's names)
from runs.control.states import (  # noqa: F401 (has_merge_marker, task_states: the spec's names)
    Poll,
    closed,
    ended_attempts,
    has_merge_marker,
    observe,
    resolve_gone,
    stopped_messages,
    task_changes,
    task_states,
)
from runs.models import (
    ATTEMPT_OUTCOME_FIELDS,
    FINAL_TASK_STATES,
    Attempt,
    Run,
    RunState,
    Task,
    TaskState,
)
from runs.planning import images, submission
from runs.planning.records import run_record, task_plans
from runs.planning.spec import SpecError

log = logging.getLogger(__name__)

RECONCILE_LOCK = "reconcile"
WAKE_FLAG = "reconcile-wake"
WAKE_TTL_S = 60.0
"""A wake-up whose reconcile never started (no worker) stops holding back others after this."""
PUSH_ASIDE_MAX_S = 600.0
"""The longest a run whose reconcile crashes is left aside before it is tried again."""
UNAVAILABLE_MAX_S = 30.0
"""The longest a run is left aside while its backend is unavailable (it will answer again)."""
SUBMISSION_TRIES = 8
"""The times the loop hands on a submission that stopped before it fails the run."""
CANCEL_TRIES = 5
"""The times a cancel re-reads a run that a reconcile changed meanwhile."""

UNUSED_TASK_FIELDS = ("settings", "inputs", "command")
"""What a poll never reads of a task; not loaded for the live runs."""


class Conflict(ValueError):
    """The run changed meanwhile or has ended."""


class SubmissionError(Exception):
    """A step of a submission failed; the message is the one of the failed run."""


class _Abandoned(Exception):
    """The run ended (it was cancelled) while its submission ran."""


# Waking the loop.


def wake() -> None:
    """Make the control loop reconcile now instead of at its next poll.

    Sends the reconcile task unless a wake-up is pending already (a reconcile lowers the flag
    when its pass starts), so a burst of changes makes one reconcile, not one each. Backends
    call it from their own threads (``Backend.subscribe``), so it never raises.
    """
    try:
        if locks.raise_flag(WAKE_FLAG, ttl_s=WAKE_TTL_S):
            waker()()
    except Exception:
        log.exception("cannot wake the control loop; it reconciles at its next poll")
        locks.lower_flag(WAKE_FLAG)


# One poll of one live run: ``runs.control.states`` decides, this writes.


def apply(run: Run, tasks: list[Task], poll: Poll) -> bool:
    """Write what a poll decided, compare-and-set; whether it was written.

    Nothing is written when nothing changed, and nothing when the run changed meanwhile (a
    cancel, another reconcile): that writer won, and the next poll starts from its record.
    """
    changes, changed_tasks = pending_writes(run, tasks, poll)
    if not changes and not changed_tasks:
        return False
    with transaction.atomic():
        return _write(run, tasks, poll, changes, changed_tasks)


TaskChanges = dict[int, dict[str, Any]]


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
    states, messages = poll.states, poll.messages
    if poll.verdict is not None:
        messages = stopped_messages(states, messages, poll.message)
        final, states = closed(
            run=run,
            state=poll.verdict,
            tasks=states,
            message=poll.message,
            workflow_exists=poll.workflow_exists,
        )
        changes.update(final)
    changed_tasks = {
        task.pk: found
        for task in tasks
        if (found := task_changes(task, states[task.task_id], messages[task.task_id]))
    }
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


def _write(
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


def keep_logs(run: Run, tasks: list[Task], *, backend: Backend) -> bool:
    """Keep the logs of the final tasks' terminated pods and record their reports; of a live
    task, the logs of the pods that ended so far, whatever its state.

    Once every pod of a task terminated its task is marked ``logs_kept`` and not asked
    again. Returns whether nothing is left to keep: every final task kept, no read of an
    ended pod's log failed, or the workflow gone (a workflow which does not exist has no logs).

    One process at a time keeps the logs of a run's final tasks and records their reports (a
    lock per run, ``recording_lock``); another that meets it leaves them owed, to its next
    pass, which reads only what is not marked yet. The settle of a cancelled run and a pass
    met on it, and each read every report the run's tasks wrote (3,000 planted ones twice).
    """
    with ExitStack() as stack:
        return _keep_logs(run, tasks, backend=backend, stack=stack)


def recording_lock(run_id: str) -> str:
    """The lock of the process keeping the logs of a run's final tasks and reading their
    reports."""
    return f"record-{run_id}"


def _keep_logs(run: Run, tasks: list[Task], *, backend: Backend, stack: ExitStack) -> bool:
    """``keep_logs``, the run's recording lock taken in ``stack`` at its first final task."""
    complete = True
    recording: bool | None = None
    for task in tasks:
        if task.state not in FINAL_TASK_STATES or task.logs_kept:
            if task.state in LIVE_POD_STATES and not backend.logs_in_store:
                complete = _keep_ended_pods(run, task, backend=backend) and complete
            if task.state in LIVE_POD_STATES and run.oom_kills:
                plan = TaskPlan.model_validate(task.plan)
                observations.record_kills(task=task, plan=plan, kills=run.oom_kills)
            continue
        if recording is None:
            recording = stack.enter_context(locks.hold(recording_lock(run.id)))
        if not recording:
            return False  # another process records them now: left to the next pass
        folder = store.task_folder(run.id, task.task_id)
        gone = False
        try:
            kept = backend.keep_logs(run.workflow, task.task_id, folder).complete
        except KeyError:
            kept = gone = True  # a workflow that does not exist has no logs
        except Exception:
            log.exception("keeping the logs of %s/%s failed", run.id, task.task_id)
            complete = False
            continue
        plan = TaskPlan.model_validate(task.plan)
        observations.record(task=task, plan=plan, folder=folder, kills=run.oom_kills)
        if kept and not gone:
            Task.objects.filter(pk=task.pk).update(logs_kept=True)
            task.logs_kept = True
        complete = complete and kept
    return complete


LIVE_POD_STATES = (TaskState.QUEUED, TaskState.RUNNING, TaskState.PREEMPTED, TaskState.RETRYING)
"""States of a task that has pods before it is final, whose ended pods a cluster's pod GC may
delete first: every state but waiting (no pod yet) and the final ones. A split task whose
coordinator waits for admission is queued while its extra workers may have ended."""


def _keep_ended_pods(run: Run, task: Task, *, backend: Backend) -> bool:
    """Keep the logs of a live task's pods that ended, before a cluster's pod GC outruns
    them; whether no read of an ended pod failed."""
    folder = store.task_folder(run.id, task.task_id)
    try:
        return not backend.keep_logs(run.workflow, task.task_id, folder).unread
    except KeyError:
        return True
    except Exception:
        log.exception("keeping the logs of %s/%s failed", run.id, task.task_id)
        return False


# The terminal record and its pending work (Ruling 25).


def settle_run(run: Run, tasks: list[Task], *, backend: Backend) -> bool:
    """Retry the pending logs, cancellation and release of a terminal run.

    The logs are kept before the workflow is stopped (a decided run) or cancelled (a cancelled
    run, or one whose submission failed); a cancelled run's logs stay pending until the ends
    of its attempts are recorded (``record_ends``). An unknown workflow counts as cancelled and an
    unknown node as released; a node is released only from this run's reservation. What
    fails stays pending for the next poll. Returns whether a pending flag was cleared.
    """
    cleared: list[str] = []
    logs_kept = run.pending_logs and keep_logs(run, tasks, backend=backend)
    if run.pending_cancel:
        decided = run.state != RunState.CANCELLED and run.submitted_at is not None
        end = backend.stop if decided else backend.cancel
        if _done(f"ending the workflow {run.workflow} of run {run.id}", end, run.workflow):
            cleared.append("pending_cancel")
    if logs_kept and record_ends(run, tasks, backend=backend):
        cleared.append("pending_logs")
    if run.pending_release:
        what = f"releasing the node {run.reserved_node} of run {run.id}"
        if _done(what, backend.unreserve, run.reserved_node, run.id):
            cleared.append("pending_release")
    return bool(cleared) and _clear(run, cleared)


def record_ends(run: Run, tasks: list[Task], *, backend: Backend) -> bool:
    """Record how the attempts of a cancelled run ended (exit code, how, when) once its
    workflow ended, as no poll reads its status any more; whether nothing is left to wait for.
    A run that ended otherwise had its attempts recorded by its polls."""
    if run.state != RunState.CANCELLED or not run.workflow:
        return True
    try:
        status = backend.status(run.workflow)
    except KeyError:
        return True
    except Exception:
        log.exception("reading the status of the cancelled run %s failed", run.id)
        return False
    if status.phase not in FINAL_PHASES:
        return False  # its processes are still ending
    if rows := ended_attempts(run, tasks, status):
        Attempt.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["task", "worker", "attempt"],
            update_fields=[*ATTEMPT_OUTCOME_FIELDS, "ended_at"],
        )
    return True


def _done(what: str, call: Callable[..., None], *args: str) -> bool:
    """Make a backend call whose target may be gone (KeyError: done); whether it is done."""
    try:
        call(*args)
    except KeyError:
        return True
    except Exception:
        log.exception("%s failed; it stays pending", what)
        return False
    return True


def _clear(run: Run, flags: list[str]) -> bool:
    """Clear pending flags of a run, compare-and-set, re-reading it on a conflict."""
    for _ in range(5):
        changes = {flag: False for flag in flags if getattr(run, flag)}
        if not changes:
            return False
        if Run.objects.write_if_unchanged(run, **changes):
            return True
        fresh = Run.objects.filter(pk=run.pk).first()
        if fresh is None:
            return False
        run = fresh
    log.warning("run %s kept changing; its pending work is retried later", run.id)
    return False


def settle(run_id: str, *, backend: Backend | None = None) -> bool:
    """Retry the pending logs, release and cancellation of a terminal run.

    A run which was deleted meanwhile (or is not terminal) is ignored. Returns whether a
    pending flag was cleared.
    """
    run = Run.objects.filter(pk=run_id).first()
    if run is None or not run.ended:
        return False
    return settle_run(run, list(run.tasks.all()), backend=backend or get_backend())


def settle_pending(run_id: str | None = None, *, backend: Backend | None = None) -> int:
    """Settle one terminal run, or every one with pending work; the runs settled."""
    backend = backend or get_backend()
    if run_id is not None:
        return int(settle(run_id, backend=backend))
    pending = Q(pending_logs=True) | Q(pending_release=True) | Q(pending_cancel=True)
    settled = 0
    for run in Run.objects.ended().filter(pending).prefetch_related("tasks"):
        try:
            settled += settle_run(run, list(run.tasks.all()), backend=backend)
        except Exception:
            log.exception("settling run %s failed", run.id)
    return settled


# The loop.


def live_runs(now: datetime, backend: Backend | None = None) -> list[tuple[Run, list[Task]]]:
    """The live runs not pushed aside, with their tasks: a few queries whatever their number.

    Given a backend that signals changes, the runs unchanged since their last poll in this
    process are left out, their tasks unread (``runs.control.unchanged``).
    """
    due = Run.objects.live().filter(Q(reconcile_after__isnull=True) | Q(reconcile_after__lte=now))
    found = due.defer("spec", "spec_text").order_by("created_at")
    rows = Task.objects.filter(run__in=due.values("pk"))
    memory = unchanged.memory_of(backend)
    if memory is None or backend is None:
        runs = list(found)
    elif memory.remembers:  # decide on a few fields of each run, load only those polled
        live = unchanged.live_rows(due)
        skipped = memory.unchanged(live, due, backend)
        polled = [row.pk for row in live if row.pk not in skipped]
        runs = list(found.filter(pk__in=polled)) if polled else []
        rows = Task.objects.filter(run_id__in=polled)
    else:
        runs = list(found)
        memory.unchanged(runs, due, backend)  # what the polls read, to remember
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
    found = live_runs(now, backend)
    memory = unchanged.memory_of(backend)
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
                    _recovered(run)
                else:
                    polled.append((run, tasks, poll_run(run, tasks, backend=backend)))
            except Exception as error:
                _crashed(run, now, error)
        written = _apply_batch(polled, now)
        for run, tasks, _poll in polled:
            if run.pk not in written:
                continue
            try:
                if memory is None or not memory.resync_only(run, written[run.pk]):
                    owed = follow_up(run, tasks, written=written[run.pk], backend=backend)
                    if memory is not None:
                        memory.owe_logs(run.pk, owed)
                _recovered(run)
                if memory is not None:
                    memory.remember([run])
            except Exception as error:
                _crashed(run, now, error)
            changed += written[run.pk]
    return changed


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
                written[run.pk] = _write(run, tasks, poll, changes, changed_tasks)
        return written
    except Exception:
        log.exception("writing a batch of %d runs failed; writing them one by one", len(changing))
    for run, tasks, poll, changes, changed_tasks in changing:
        run.version = versions[run.pk]  # the rolled back write had counted it up
        try:
            with transaction.atomic():
                written[run.pk] = _write(run, tasks, poll, changes, changed_tasks)
        except Exception as error:
            del written[run.pk]
            _crashed(run, now, error)
    return written


def _crashed(run: Run, now: datetime, error: Exception) -> None:
    """Push aside a run whose reconcile raised: briefly when its backend is unavailable."""
    unavailable = isinstance(error, BackendUnavailable)
    if unavailable:
        log.warning("reconciling run %s: %s; it is tried again soon", run.id, error)
    else:
        log.exception("reconciling run %s failed; it is pushed aside", run.id)
    _push_aside(run, now, unavailable=unavailable)


def _recovered(run: Run) -> None:
    """A run whose reconcile went through is no longer pushed aside."""
    if run.reconcile_failures:
        Run.objects.filter(pk=run.pk).update(reconcile_failures=0, reconcile_after=None)


def _push_aside(run: Run, now: datetime, *, unavailable: bool = False) -> None:
    """Leave a run whose reconcile crashed for a while, doubling the wait each time.

    Up to ``PUSH_ASIDE_MAX_S`` for a broken record; up to ``UNAVAILABLE_MAX_S`` when the
    backend was unavailable, so its runs go on soon after it answers again. A plain update,
    not compare-and-set: it is the loop's bookkeeping, not the record, and must not make a
    user's cancel of the run conflict.
    """
    failures = run.reconcile_failures + 1
    longest = UNAVAILABLE_MAX_S if unavailable else PUSH_ASIDE_MAX_S
    wait = min(settings.SIMRUN_POLL_S * 2**failures, longest)
    try:
        Run.objects.filter(pk=run.pk).update(
            reconcile_failures=failures, reconcile_after=now + timedelta(seconds=wait)
        )
    except Exception:
        log.exception("cannot push run %s aside", run.id)


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


# Cancel.


def request_cancel(run: Run) -> None:
    """Write a run cancelled (the terminal record first), then hand the backend calls to settle.

    Its tasks not final are skipped; the workflow is cancelled and the node released by the
    settle task after the commit. A run a reconcile changed meanwhile is read again and the
    cancel retried. Raises ``Conflict`` when the run ended, or kept changing.
    """
    for _ in range(CANCEL_TRIES):
        if run.ended:
            raise Conflict(f"run {run.id} has ended ({run.state})")
        if _close(run, list(run.tasks.all()), RunState.CANCELLED, "cancelled by the user"):
            break
        fresh = Run.objects.filter(pk=run.pk).first()
        if fresh is None:
            raise Conflict(f"run {run.id} was deleted meanwhile")
        run = fresh
    else:
        raise Conflict(f"run {run.id} kept changing; try again")
    settle = settler()
    after_commit(lambda: settle(run.id), f"the settling of run {run.id}")


def _close(run: Run, tasks: list[Task], state: RunState, message: str, **update: Any) -> bool:
    """Write a run terminal, its tasks not final skipped, compare-and-set; whether it was written.

    ``update`` are further fields of the run (see ``closed``).
    """
    current = {t.task_id: TaskState(t.state) for t in tasks}
    messages = stopped_messages(current, {t.task_id: t.message for t in tasks}, message)
    changes, states = closed(run=run, state=state, tasks=current, message=message, **update)
    with transaction.atomic():
        if not Run.objects.write_if_unchanged(run, **changes):
            return False
        for task in tasks:
            if fields := task_changes(task, states[task.task_id], messages[task.task_id]):
                Task.objects.filter(pk=task.pk).update(**fields)
    return True


def cancel(run_id: str) -> Run:
    """Cancel a run: write it cancelled, then cancel its workflow and release its node.

    Raises ``KeyError`` for an unknown run and ``Conflict`` (a ``ValueError``) for one that
    has ended.
    """
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise KeyError(run_id)
    request_cancel(run)
    return run


# Submission.


def submit(run_id: str, *, backend: Backend | None = None) -> bool:
    """Submit a run left submitting: resolve and build its image, reserve a node, submit.

    Idempotent, so a submission resumes after a killed process (``recover``): an image that
    was built is found, a node reserved for the run is kept, a workflow that exists is taken
    as submitted. One process at a time submits a run: False when another one does (its
    lock is held), True otherwise. A failure fails the run and cancels a workflow that may
    exist; a run cancelled meanwhile ends with no live workflow.
    """
    backend = backend or get_backend()
    with locks.hold(f"submit-{run_id}") as held:
        if not held:
            return False
        run = Run.objects.filter(pk=run_id).first()
        if run is not None and run.state == RunState.SUBMITTING:
            _submit(run, backend)
    return True


def _submit(run: Run, backend: Backend) -> None:
    """Submit a run; what failed is failed, or left submitting for the loop to hand on again.

    The backend unavailable and the database failing are left to the loop
    (``resume_submission``); any other failure fails the run and cancels the workflow by its
    name, since a process before this one may have created it.
    """
    tasks = list(run.tasks.order_by("position"))
    may_exist = run.workflow or workflow_name(run.id)
    try:
        cluster = cluster_config()
        if not reuse.copy_reused(run, tasks, backend=backend):
            raise _Abandoned
        if all(task.reused_whole for task in tasks):
            _close(run, tasks, RunState.SUCCEEDED, "")  # nothing left to run
            return
        run = _prepare(run, tasks, backend, cluster)
        name = backend.submit(run_record(run, tasks), task_plans(tasks), task_types(), cluster)
    except _Abandoned:
        _abandon(run.id, may_exist, backend)
        return
    except BackendUnavailable as error:
        log.warning("submitting run %s: %s; the loop hands it on again", run.id, error)
        return
    except DatabaseError:
        raise
    except ValueError as error:  # refused now; a submission before may have created one
        _fail_submission(run.id, str(error), _made_before(may_exist, backend), backend)
        return
    except Exception as error:
        log.exception("submitting run %s failed", run.id)
        message = (
            str(error) if isinstance(error, SubmissionError) else f"submission failed: {error}"
        )
        _fail_submission(run.id, message, may_exist, backend)
        return
    if _write_submitting(run, state=RunState.RUNNING, workflow=name, submitted_at=timezone.now()):
        wake()
    else:
        _abandon(run.id, name, backend)


def _made_before(name: str, backend: Backend) -> str:
    """The workflow a refused submission must cancel: the one of this name if a process
    before made it (a resumed submission refused once the node sizes are known), else none.

    The backend is asked for it (``status``), not its cache of versions: a process just
    started has seen no workflow yet, and one made before must still be cancelled. A backend
    that cannot tell gets the name: an unknown workflow counts as cancelled."""
    try:
        backend.status(name)
    except KeyError:
        return ""
    except Exception:  # noqa: BLE001 - cancelling a workflow that is not there costs nothing
        log.warning("cannot tell whether workflow %s exists; it is cancelled", name)
    return name


def _prepare(run: Run, tasks: list[Task], backend: Backend, cluster: ClusterConfig) -> Run:
    """The image and the node of a run, written into its record before the submission."""
    if backend.runs_images:
        environment = images.resolve(run.spec.get("environment", {}), cluster)
        if environment.digest is not None and not backend.has_image(environment.image):
            context = images.write_context(environment)
            try:
                backend.build_image(context, environment.image)
            except BackendUnavailable:
                raise
            except Exception as error:
                raise SubmissionError(
                    f"building the image {environment.image} failed: {error}"
                ) from error
        if environment.image != run.image and not _write_submitting(run, image=environment.image):
            raise _Abandoned
    if run.spec.get("reserve_node"):
        run = _free_node(run, tasks, backend)
    fresh = Run.objects.filter(pk=run.pk).first()
    if fresh is None or fresh.state != RunState.SUBMITTING:
        raise _Abandoned
    return fresh


def _free_node(run: Run, tasks: list[Task], backend: Backend) -> Run:
    """Reserve a node for the run: the one its record names (a resumed submission), else the
    smallest free one that fits its largest task (``choose_node``); a node another run took
    meanwhile is passed over for the next."""
    taken: set[str] = set()
    for _ in range(RESERVE_TRIES):
        node = run.reserved_node if run.reserved_node not in taken else ""
        if not node:
            try:
                node = backend.choose_node(task_plans(tasks), taken=taken)
            except LookupError as error:
                raise SubmissionError(str(error)) from None
        if node != run.reserved_node and not _write_submitting(run, reserved_node=node):
            raise _Abandoned
        try:
            backend.reserve(node, run.id)
        except ValueError:
            taken.add(node)  # another run holds it
            continue
        holder = next((n.reserved_by for n in backend.nodes() if n.name == node), None)
        if holder == run.id:
            return run
        taken.add(node)
    raise SubmissionError(f"other runs took {len(taken)} free nodes first; submit it again")


RESERVE_TRIES = 5
"""Nodes tried when other runs reserve the chosen one first."""


def _write_submitting(run: Run, **changes: Any) -> bool:
    """Write a submitting run, compare-and-set, re-reading it on a conflict.

    False when it is no longer submitting (it was cancelled meanwhile).
    """
    while True:
        if run.state != RunState.SUBMITTING:
            return False
        if Run.objects.write_if_unchanged(run, **changes):
            return True
        try:
            run.refresh_from_db()
        except Run.DoesNotExist:
            return False


def resume_submission(run: Run, now: datetime, *, schedule: Schedule, backend: Backend) -> None:
    """Hand on a submission that stopped; fail it after ``SUBMISSION_TRIES``.

    A submission stops when its process died, the database failed after the backend accepted
    the workflow, or the backend was unavailable. One that is running (its lock is held) is
    left alone, and a new run for two polls, the time its first submission takes to start.
    Each hand-on pushes the run aside for a short, capped while (``_push_aside``).
    """
    if run.reconcile_after is None and now - run.created_at < _submission_grace():
        return
    if locks.held(f"submit-{run.id}"):
        return
    if run.reconcile_failures >= SUBMISSION_TRIES:
        message = f"the submission did not complete after {SUBMISSION_TRIES} tries"
        _fail_submission(run.id, message, run.workflow or workflow_name(run.id), backend)
        return
    log.info("the submission of run %s stopped; it is handed on again", run.id)
    _push_aside(run, now, unavailable=True)
    try:
        schedule(run.id)
    except Exception:  # the broker: the next hand-on is as soon as for an unavailable backend
        log.exception("cannot hand on the submission of run %s", run.id)


def _submission_grace() -> timedelta:
    return timedelta(seconds=2 * settings.SIMRUN_POLL_S)


def _fail_submission(run_id: str, message: str, workflow: str, backend: Backend) -> None:
    """Fail a run whose submission failed; a workflow that may exist is cancelled."""
    while True:
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            return
        if run.state != RunState.SUBMITTING:
            _abandon(run_id, workflow, backend)
            return
        tasks = list(run.tasks.all())
        if _close(run, tasks, RunState.FAILED, message, workflow=workflow):
            settle_run(run, tasks, backend=backend)
            return


def _abandon(run_id: str, workflow: str, backend: Backend) -> None:
    """A run that ended while it was submitted: cancel the workflow created, release the node."""
    for _ in range(5):
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            return
        changes: dict[str, Any] = {}
        if workflow and run.workflow != workflow:
            changes.update(workflow=workflow, pending_cancel=True, pending_logs=True)
        if run.reserved_node and not run.pending_release:
            changes["pending_release"] = True
        if not changes or Run.objects.write_if_unchanged(run, **changes):
            settle_run(run, list(run.tasks.all()), backend=backend)
            return
    log.error("run %s kept changing while its submission was abandoned", run_id)


# Learning the types of a run's sources (a run ``learning``: no tasks yet).


def learn(run_id: str, *, backend: Backend | None = None, schedule: Schedule | None = None) -> bool:
    """Learn the types a ``learning`` run's sources ship, then plan and hand it on to its
    submission (``submission.plan_learned``); what cannot run fails the run, saying why
    (pip's last lines, the settings a type refused, a timeout). One process at a time learns
    a run: False when another one does."""
    with locks.hold(f"learn-{run_id}") as held:
        if not held:
            return False
        run = Run.objects.filter(pk=run_id, state=RunState.LEARNING).first()
        if run is None:
            return True
        try:
            submission.plan_learned(run, backend=backend, schedule=schedule)
        except SpecError as error:
            _fail_learning(run, "\n".join(f"{p}: {' '.join(m)}" for p, m in error.errors.items()))
        except CannotRun as error:
            _fail_learning(run, str(error))
    return True


def _fail_learning(run: Run, message: str) -> None:
    """Fail a run whose sources' types could not be learned (a cancel meanwhile wins)."""
    for _ in range(CANCEL_TRIES):
        if run.state != RunState.LEARNING or _close(run, [], RunState.FAILED, message):
            return
        fresh = Run.objects.filter(pk=run.pk).first()
        if fresh is None:
            return
        run = fresh


def resume_learning(run: Run, now: datetime) -> None:
    """Hand on the learning of a run that stopped (its worker died, the broker lost it); fail
    it after ``SUBMISSION_TRIES``. Left alone while it may still be queued or learning: for
    the longest a learning takes (``SIMRUN_LEARN_INSTALL_S`` and ``_DESCRIBE_S``)."""
    longest = settings.SIMRUN_LEARN_INSTALL_S + settings.SIMRUN_LEARN_DESCRIBE_S
    grace = _submission_grace() + timedelta(seconds=longest)
    if run.reconcile_after is None and now - run.created_at < grace:
        return
    if locks.held(f"learn-{run.id}"):
        return
    if run.reconcile_failures >= SUBMISSION_TRIES:
        message = f"the learning of its sources did not complete after {SUBMISSION_TRIES} tries"
        _fail_learning(run, message)
        return
    log.info("the learning of run %s stopped; it is handed on again", run.id)
    _push_aside(run, now, unavailable=True)
    try:
        learner()(run.id)
    except Exception:  # the broker: handed on again at the next try
        log.exception("cannot hand on the learning of run %s", run.id)


# Recovery.


def recover(*, backend: Backend | None = None) -> list[str]:
    """Settle what a stopped service left: called when a Celery worker starts.

    A run left submitting resumes its submission (idempotent: an image which was built is
    found, a node reserved for the run is kept, a workflow which was created is taken as
    submitted); one whose submission runs in another process is left to it, and to the loop
    should it stop (``resume_submission``). A run left learning is handed to the learner again
    unless a process learns it. A record which is not terminal and has no workflow
    name fails. The pending logs, releases and cancellations of terminal runs are retried.
    A run whose recovery raises is logged and the others go on. Returns the runs whose
    submission this call handled.
    """
    backend = backend or get_backend()
    handled = []
    submitting = Run.objects.filter(state=RunState.SUBMITTING).order_by("created_at")
    for run_id in submitting.values_list("pk", flat=True):
        with _isolated(f"resuming the submission of run {run_id}"):
            if submit(run_id, backend=backend):
                handled.append(run_id)
    learning = Run.objects.filter(state=RunState.LEARNING).order_by("created_at")
    for run_id in learning.values_list("pk", flat=True):
        with _isolated(f"resuming the learning of run {run_id}"):
            if not locks.held(f"learn-{run_id}"):
                learner()(run_id)
    for run in Run.objects.filter(state=RunState.RUNNING, workflow="").prefetch_related("tasks"):
        with _isolated(f"recovering run {run.id}"):
            reconcile_run(run, list(run.tasks.all()), backend=backend)
    with _isolated("settling the pending work of terminal runs"):
        settle_pending(backend=backend)
    return handled


@contextmanager
def _isolated(what: str) -> Iterator[None]:
    """Log what raises in the block instead of raising it, so the steps after it go on."""
    try:
        yield
    except Exception:
        log.exception("%s failed; the loop retries it", what)
