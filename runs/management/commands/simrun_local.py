"""``manage.py simrun_local``: the step of the local backend, the process ``simrun serve`` runs.

Kills the processes a service before left for ended or unknown runs, then steps until
SIGTERM or SIGINT: starts what the DAGs and the free cores allow, notices ends, and wakes the
control loop after every start and end of a process.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs import controller
from runs.backends import get_backend
from runs.backends.local import LocalBackend


class Command(BaseCommand):
    help = "Run the step of the local backend until SIGTERM or SIGINT."

    def handle(self, *args: Any, **options: Any) -> None:
        backend = get_backend()
        if not isinstance(backend, LocalBackend):
            raise CommandError(f"the backend of the settings is {backend.name}, not local")
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        backend.subscribe(controller.wake)
        backend.run_steps(stop)
