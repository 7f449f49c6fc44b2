"""The pending work of a terminal run: keeping its logs, ending its workflow, releasing its
node, each retried until it is done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db.models import Q

from runs.backends import get_backend
from runs.backends.base import FINAL_PHASES, Backend
from runs.control.failures import ended_attempts
from runs.control.log_keeping import keep_logs
from runs.models import ATTEMPT_OUTCOME_FIELDS, Attempt, Run, RunState, Task

log = logging.getLogger(__name__)


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
