"""Cancelling a run: the terminal record first, the backend's calls after the commit."""

from __future__ import annotations

from runs.common.errors import Conflict
from runs.common.handoff import after_commit, settler
from runs.control.closing import close_run
from runs.models import Run, RunState

CANCEL_TRIES = 5
"""The times a cancel re-reads a run that a reconcile changed meanwhile."""


def request_cancel(run: Run) -> None:
    """Write a run cancelled (the terminal record first), then hand the backend calls to settle.

    Its tasks not final are skipped; the workflow is cancelled and the node released by the
    settle task after the commit. A run a reconcile changed meanwhile is read again and the
    cancel retried. Raises ``Conflict`` when the run ended, or kept changing.
    """
    for _ in range(CANCEL_TRIES):
        if run.ended:
            raise Conflict(f"run {run.id} has ended ({run.state})")
        if close_run(run, list(run.tasks.all()), RunState.CANCELLED, "cancelled by the user"):
            break
        fresh = Run.objects.filter(pk=run.pk).first()
        if fresh is None:
            raise Conflict(f"run {run.id} was deleted meanwhile")
        run = fresh
    else:
        raise Conflict(f"run {run.id} kept changing; try again")
    settle = settler()
    after_commit(lambda: settle(run.id), f"the settling of run {run.id}")


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
