"""``manage.py simrun_steps``: the step of a backend that needs a process of its own
(``runs.backends.base.Stepped``, the local backend's), the process ``simrun serve`` runs.

It steps until SIGTERM or SIGINT (the local backend: starts what the DAGs and the free cores
allow, notices ends) and wakes the control loop after every change.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from harness.lifecycle import SignalStop
from runs.backends import get_backend
from runs.backends.base import Stepped
from runs.control import waking


class Command(BaseCommand):
    help = "Run the step of the backend until SIGTERM or SIGINT."
    # The system checks import every URL, view and serializer: seconds of a first start's
    # CPU for a process that serves none of them (the web server's start checks them).
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        backend = get_backend()
        if not isinstance(backend, Stepped):
            raise CommandError(f"the backend of the settings ({backend.name}) has no step")
        stop = SignalStop()  # a threading.Event set by a handler could wait for ever
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        backend.subscribe(waking.wake)
        backend.run_steps(stop)
        # Stopped: leave without the interpreter's teardown of Django (seconds on a busy
        # machine), as simrun serve's other children do.
        connections.close_all()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
