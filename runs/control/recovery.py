"""Recovery: settling what a stopped service left, when a Celery worker starts."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from runs.backends import get_backend
from runs.backends.base import Backend
from runs.common.handoff import learner
from runs.control import locks
from runs.control.polling import reconcile_run
from runs.control.settling import settle_pending
from runs.control.submitting import submit
from runs.models import Run, RunState

log = logging.getLogger(__name__)


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
