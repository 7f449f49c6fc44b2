"""Gunicorn's settings for ``simrun serve``'s web server (``-c python:simrun_site.gunicorn``).

Quiet: only warnings and errors (its start lines said nothing a user needs, one with an empty
address under ``--reuse-port``). A worker imports the URLs (every view) before it takes a
request, so the first one is not seconds late. A worker that stopped leaves at once: the
interpreter's teardown of a Django app takes seconds of garbage collection, past the graceful
timeout on a busy machine, and the master then killed workers that had finished
(``SIGKILL! Perhaps out of memory?``). The master never loads the app: it stops at once too.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

loglevel = "warning"


def post_worker_init(worker: Any) -> None:
    """In a worker, its app loaded: import the URLs before the first request does."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imported for its side effect


def worker_exit(server: Any, worker: Any) -> None:
    """In a worker, once it stopped serving: exit with its code, without the teardown."""
    from django.db import connections

    error = sys.exc_info()[1]
    code = error.code if isinstance(error, SystemExit) else 0
    connections.close_all()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)
