"""Gunicorn's settings for ``simrun serve``'s web server (``-c python:simrun_site.gunicorn``).

Quiet: only warnings and errors (its start lines said nothing a user needs, one with an empty
address under ``--reuse-port``). The master loads the app and its URLs (every view) once,
and forks the workers from it: each starts without importing Django again (a second of CPU
apiece) and its first request is not seconds late. A worker that stopped leaves at once: the
interpreter's teardown of a Django app takes seconds of garbage collection, past the graceful
timeout on a busy machine, and the master then killed workers that had finished
(``SIGKILL! Perhaps out of memory?``). The master, which holds the app too, leaves without
it under ``simrun serve`` (a fork of serve's, ``runs.cli.processes``), through it elsewhere
(about a second). The workers are ``simrun_site.front.Worker``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any

loglevel = "warning"
preload_app = True
READY_WAIT_S = 120.0


def when_ready(server: Any) -> None:
    """In the master, the app loaded, before it forks a worker: import the URLs."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imported for its side effect


def post_worker_init(worker: Any) -> None:
    """In a worker: under ``simrun serve`` take no request (a run) before the Celery worker
    takes tasks: the web server starts beside it, and a request meanwhile waits in the
    kernel's queue."""
    # A signal before uvicorn serves (while waiting for the Celery worker) leaves at once;
    # uvicorn's own handlers replace these while it serves, and once it stopped it raises
    # the signal it caught again, which then leaves without the interpreter's teardown.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, lambda *_: leave(0))
    ready = os.environ.get("SIMRUN_WORKER_READY")
    deadline = time.monotonic() + READY_WAIT_S
    while ready and not os.path.exists(ready) and time.monotonic() < deadline:
        worker.notify()  # alive for the master, which kills a silent worker after its timeout
        time.sleep(0.05)


def worker_exit(server: Any, worker: Any) -> None:
    """In a worker, once it stopped serving: exit with its code, without the teardown."""
    error = sys.exc_info()[1]
    code = error.code if isinstance(error, SystemExit) else 0
    leave(code if isinstance(code, int) else 1)


def leave(code: int) -> None:
    """Exit a worker now: its output flushed, its database connections closed."""
    from django.db import connections

    connections.close_all()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
