"""Celery tasks: thin shells that call one function of the controller (runs/controller.py).

``reconcile`` and ``settle`` run on the beat schedule (``CELERY_BEAT_SCHEDULE``); ``reconcile``
is also sent by ``controller.wake``. ``submit_run`` is sent per run after its submission
commits; ``recover`` when a worker starts, which also subscribes the controller's wake-up
to the backend, so a backend that sees a change makes the loop reconcile at once.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.signals import worker_ready

log = logging.getLogger(__name__)


@shared_task(name="runs.tasks.submit_run", bind=True, max_retries=None)  # type: ignore[untyped-decorator]  # celery ships no types
def submit_run(self: Task, run_id: str) -> None:
    """Resolve the image, reserve a node if asked and create the workflow of a run.

    While another process submits the run (or its lock has not yet expired after that process
    died), the task retries after the lock's time to live.
    """
    from runs import controller, locks

    if not controller.submit(run_id):
        raise self.retry(countdown=locks.LOCK_TTL_S)


@shared_task(name="runs.tasks.settle")  # type: ignore[untyped-decorator]  # celery ships no types
def settle(run_id: str | None = None) -> None:
    """Retry the pending logs, release and cancellation of terminal runs (one, or all)."""
    from runs import controller

    controller.settle_pending(run_id)


@shared_task(name="runs.tasks.reconcile")  # type: ignore[untyped-decorator]  # celery ships no types
def reconcile() -> None:
    """Bring the records of the live runs up to date with the backend.

    A line at INFO only for a pass that changed a run (DEBUG otherwise): every 5 s.
    """
    from runs import controller, metrics

    with metrics.reconcile_timer() as timer:
        changed = controller.reconcile()
    metrics.count_changed(changed)
    level = logging.INFO if changed else logging.DEBUG
    log.log(level, "reconciled", extra={"changed": changed, "seconds": timer.seconds})


@shared_task(name="runs.tasks.recover")  # type: ignore[untyped-decorator]  # celery ships no types
def recover() -> None:
    """Resume what a stopped service left: submissions, unnamed records, pending work."""
    from runs import controller

    controller.recover()


@worker_ready.connect  # type: ignore[untyped-decorator]  # celery ships no types
def follow_backend(**kwargs: Any) -> None:
    """When a worker starts: subscribe the controller's wake-up to the backend, then recover."""
    from runs import controller
    from runs.backends import get_backend

    try:
        get_backend().subscribe(controller.wake)
    except Exception:
        log.exception("cannot subscribe to the backend; the loop reconciles at its polls")
    recover.delay()
