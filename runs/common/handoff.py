"""Work handed to a worker once a transaction commits, without failing what was committed.

The request that made a run, a cancel or a release has already written it; a broker that
refuses the message then (locked, restarting) must not turn that into an error. The control
loop hands such work on again: a submission that did not start (``resume_submission``), the
settling of terminal runs (beat's ``settle``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.utils.module_loading import import_string

log = logging.getLogger(__name__)

Schedule = Callable[[str], None]
"""How work on a run is handed on: given a run's id, done soon in another process."""


def scheduler() -> Schedule:
    """The service's way of handing on a submission (``SIMRUN_SUBMIT_LATER``: the Celery task)."""
    schedule: Schedule = import_string(settings.SIMRUN_SUBMIT_LATER)
    return schedule


def learner() -> Schedule:
    """The service's way of handing on the learning of a run's sources
    (``SIMRUN_LEARN_LATER``: the Celery task, on its own queue)."""
    learn: Schedule = import_string(settings.SIMRUN_LEARN_LATER)
    return learn


def settler() -> Schedule:
    """The service's way of handing on the settling of a run (``SIMRUN_SETTLE_LATER``)."""
    settle: Schedule = import_string(settings.SIMRUN_SETTLE_LATER)
    return settle


def waker() -> Callable[[], None]:
    """The service's way of making the loop reconcile soon (``SIMRUN_RECONCILE_LATER``)."""
    reconcile: Callable[[], None] = import_string(settings.SIMRUN_RECONCILE_LATER)
    return reconcile


def after_commit(send: Callable[[], object], what: str) -> None:
    """Call ``send`` once the transaction commits; log its failure as a warning, not raise."""

    def send_or_wait() -> None:
        try:
            send()
        except Exception:  # the broker: the control loop hands the work on again
            log.warning("%s waits: the broker did not take it", what, exc_info=True)

    transaction.on_commit(send_or_wait)
