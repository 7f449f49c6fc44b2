"""The body of a settled run's page (its tasks' cards, the DAG, the timeline, the usage),
written once per process.

That body was most of the page's cost, and computed at every view: the outputs listed from
the store, each attempt's figures, some 700 template nodes. A settled run (ended, nothing
pending) has its tasks written only with a write that counts its version up (its tags and
note, written without, are in the page's head, written at every view), so its body is kept
by the run's id and version, the viewer (a task's message names only the runs its viewer
may see), the time zone its times are shown in and the page's query (the results table a
link opens), the most recently used ``PAGES_KEPT``. A live run's body is written at every
view: its durations run on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from django.utils.safestring import SafeString

from runs.models import Run

PAGES_KEPT = 500
"""Settled runs' bodies kept per process: about 20 KB each, 10 MB."""

Key = tuple[str, int, Any, str, str]


def page_key(run: Run, request: HttpRequest) -> Key | None:
    """What a settled run's body depends on; None for a live run, whose body is not kept."""
    if run.live:
        return None
    zone = timezone.get_current_timezone_name()
    return (run.pk, run.version, request.user.pk, zone, request.GET.urlencode())


class SettledBodies:
    """The bodies of settled runs' pages by ``page_key``, the ``size`` most recently used."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._kept: OrderedDict[Key, SafeString] = OrderedDict()
        self._lock = threading.Lock()

    def body(self, key: Key | None, write: Callable[[], SafeString]) -> SafeString:
        """The body kept for ``key``, else ``write()``'s, kept when ``key`` is not None."""
        if key is None:
            return write()
        with self._lock:
            if (kept := self._kept.get(key)) is not None:
                self._kept.move_to_end(key)
                return kept
        written = write()
        with self._lock:
            self._kept[key] = written
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return written


SETTLED = SettledBodies(PAGES_KEPT)
