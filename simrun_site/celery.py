"""The Celery app of the service, configured from the Django settings (``CELERY_*``).

The beat schedule of the control loop (reconcile, settle) is ``CELERY_BEAT_SCHEDULE``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings
from logging.config import dictConfig
from pathlib import Path
from typing import Any

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import (
    beat_init,
    setup_logging,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")
# The service runs as root by design (the local backend starts each user's tasks as a user of
# their own; docs/team.md) and the worker runs no task's code: Celery's warning against a
# root worker said nothing to act on, at every start. Its messages are JSON, never pickle.
warnings.filterwarnings("ignore", "You're running the worker with superuser", SecurityWarning)

app = Celery("simrun")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])


@setup_logging.connect  # type: ignore[untyped-decorator]  # celery ships no types
def log_as_the_service(**kwargs: Any) -> None:
    """The worker and beat log as the web server does (``LOGGING``), Python's warnings once."""
    from django.conf import settings

    dictConfig(settings.LOGGING)
    logging.captureWarnings(True)


@worker_ready.connect  # type: ignore[untyped-decorator]  # celery ships no types
def say_ready(**kwargs: Any) -> None:
    """Touch ``SIMRUN_WORKER_READY`` (set by ``simrun serve``) once the worker takes tasks."""
    if path := os.environ.get("SIMRUN_WORKER_READY"):
        Path(path).touch()


@worker_shutting_down.connect  # type: ignore[untyped-decorator]  # celery ships no types
def stop_waiting(**kwargs: Any) -> None:
    """Told to stop: the embedded broker stops waiting for messages at once."""
    from simrun_site.broker import STOPPING

    STOPPING.set()


@worker_shutdown.connect  # type: ignore[untyped-decorator]  # celery ships no types
def leave_at_once(sender: Any, **kwargs: Any) -> None:
    """The worker stopped (its tasks done, acks sent, the pool closed): exit now. The
    interpreter's exit ran billiard's pool finalizer, which waits for ever on the call queue's
    lock when a pool process was killed holding it, and took seconds tearing Django down."""
    from django.db import connections

    connections.close_all()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(getattr(sender, "exitcode", None) or 0)


@beat_init.connect  # type: ignore[untyped-decorator]  # celery ships no types
def stop_once(sender: Any, **kwargs: Any) -> None:
    """Beat stops at the first SIGTERM or SIGINT and ignores the next: Celery's handler
    saved the schedule and raised SystemExit at each, and a second signal (serve's SIGTERM
    after the terminal's Ctrl-C) came during the exit and printed a traceback."""

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sender.sync()
        raise SystemExit()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
