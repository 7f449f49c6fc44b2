"""Waking the control loop: a reconcile now instead of at its next poll."""

from __future__ import annotations

import logging

from runs.common.handoff import waker
from runs.control import locks

log = logging.getLogger(__name__)


WAKE_FLAG = "reconcile-wake"
WAKE_TTL_S = 60.0
"""A wake-up whose reconcile never started (no worker) stops holding back others after this."""


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
