"""Runs whose reconcile failed are left aside for a while, longer each time."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings

from runs.backends.base import BackendUnavailable
from runs.models import Run

log = logging.getLogger(__name__)


PUSH_ASIDE_MAX_S = 600.0
"""The longest a run whose reconcile crashes is left aside before it is tried again."""
UNAVAILABLE_MAX_S = 30.0
"""The longest a run is left aside while its backend is unavailable (it will answer again)."""


def crashed(run: Run, now: datetime, error: Exception) -> None:
    """Push aside a run whose reconcile raised: briefly when its backend is unavailable."""
    unavailable = isinstance(error, BackendUnavailable)
    if unavailable:
        log.warning("reconciling run %s: %s; it is tried again soon", run.id, error)
    else:
        log.exception("reconciling run %s failed; it is pushed aside", run.id)
    push_aside(run, now, unavailable=unavailable)


def recovered(run: Run) -> None:
    """A run whose reconcile went through is no longer pushed aside."""
    if run.reconcile_failures:
        Run.objects.filter(pk=run.pk).update(reconcile_failures=0, reconcile_after=None)


def push_aside(run: Run, now: datetime, *, unavailable: bool = False) -> None:
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


def submission_grace() -> timedelta:
    """How long a new run's submission is left alone before the loop hands it on: two polls."""
    return timedelta(seconds=2 * settings.SIMRUN_POLL_S)
