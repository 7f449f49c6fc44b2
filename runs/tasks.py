"""Celery tasks: thin shells that each call one function of the control loop (runs/control/).

``reconcile`` and ``settle`` run on the beat schedule (``CELERY_BEAT_SCHEDULE``); ``reconcile``
is also sent by ``waking.wake`` (``reconcile_later``, the setting ``SIMRUN_RECONCILE_LATER``),
``settle`` by a cancel or a release (``settle_later``, ``SIMRUN_SETTLE_LATER``): the control loop
is handed these senders, it does not import this module. ``submit_run`` is sent per run by
``submit_later`` (the setting ``SIMRUN_SUBMIT_LATER``) after its submission commits, and again by
the loop when a submission stopped; ``recover`` when a worker starts, which also subscribes the
control loop's wake-up to the backend, so a backend that sees a change makes the loop reconcile at
once.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

log = logging.getLogger(__name__)


@shared_task(name="runs.tasks.submit_run")  # type: ignore[untyped-decorator]  # celery ships no types
def submit_run(run_id: str) -> None:
    """Resolve the image, reserve a node if asked and create the workflow of a run.

    Nothing is done while another process submits the run; should that one stop, the loop
    hands the submission on again (``submitting.resume_submission``).
    """
    from runs.control import submitting

    submitting.submit(run_id)


@shared_task(name="runs.tasks.learn_run")  # type: ignore[untyped-decorator]  # celery ships no types
def learn_run(run_id: str) -> None:
    """A turn of the learner, handed on for ``run_id``: learn the runs waiting, the users' in
    turn (``learning.learn_in_turn``), then plan and submit each; on a queue of its own
    (``CELERY_TASK_ROUTES``), so it never holds the control loop's."""
    from runs.control import learning

    learning.learn_in_turn()


def learn_later(run_id: str) -> None:
    """Hand the learning of a run to the learner: the ``Schedule`` of ``SIMRUN_LEARN_LATER``."""
    learn_run.delay(run_id)


def submit_later(run_id: str) -> None:
    """Hand a run's submission to a worker: the ``Schedule`` of ``SIMRUN_SUBMIT_LATER``."""
    submit_run.delay(run_id)


def settle_later(run_id: str) -> None:
    """Hand the settling of a run to a worker: the ``Schedule`` of ``SIMRUN_SETTLE_LATER``."""
    settle.delay(run_id)


def reconcile_later() -> None:
    """Make the loop reconcile in a worker: ``SIMRUN_RECONCILE_LATER``."""
    reconcile.delay()


@shared_task(name="runs.tasks.settle")  # type: ignore[untyped-decorator]  # celery ships no types
def settle(run_id: str | None = None) -> None:
    """Retry the pending logs, release and cancellation of terminal runs (one, or all)."""
    from runs.control import settling

    settling.settle_pending(run_id)


@shared_task(name="runs.tasks.reconcile")  # type: ignore[untyped-decorator]  # celery ships no types
def reconcile() -> None:
    """Bring the records of the live runs up to date with the backend.

    A line at INFO only for a pass that changed a run (DEBUG otherwise): every 5 s.
    """
    from runs.common import metrics
    from runs.control import reconciling

    with metrics.reconcile_timer() as timer:
        changed = reconciling.reconcile()
    metrics.count_changed(changed)
    level = logging.INFO if changed else logging.DEBUG
    log.log(level, "reconciled", extra={"changed": changed, "seconds": timer.seconds})


@shared_task(name="runs.tasks.recover")  # type: ignore[untyped-decorator]  # celery ships no types
def recover() -> None:
    """Resume what a stopped service left: submissions, unnamed records, pending work."""
    from runs.control import recovery

    recovery.recover()


@worker_ready.connect  # type: ignore[untyped-decorator]  # celery ships no types
def follow_backend(**kwargs: Any) -> None:
    """When a worker starts: subscribe the control loop's wake-up to the backend, then recover."""
    from runs.backends import get_backend
    from runs.control import waking

    try:
        get_backend().subscribe(waking.wake)
    except Exception:
        log.exception("cannot subscribe to the backend; the loop reconciles at its polls")
    recover.delay()
