"""What a settled run shows, written once per process: its page's body (its tasks' cards, the
DAG, the timeline, the usage) and its API answer.

Both were computed at every request: the outputs listed from the store, each attempt's
figures, the serializer's fields of every task and attempt, some 700 template nodes. A
settled run (ended, nothing pending) has its tasks written only with a write that counts
its version up; its tags and note are written without, so they are in the key. What is
kept is kept by the run's id and version, its tags and note, the viewer (a task's message
names only the runs its viewer may see), the time zone its times are shown in and the
request's query (the results table a link opens), the most recently used ``KEPT``. A live
run's is written at every request: its durations run on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from django.http import HttpRequest
from django.utils import timezone

from runs.models import Run

KEPT = 500
"""Settled runs' answers or bodies kept per process, each: about 20 KB a body, 10 MB."""

V = TypeVar("V")


def settled_key(run: Run, request: HttpRequest) -> Hashable | None:
    """What a settled run's answer or body depends on; None for a live run's, not kept."""
    if run.live:
        return None
    zone = timezone.get_current_timezone_name()
    tags = tuple(run.tags or ())
    return (run.pk, run.version, tags, run.note, request.user.pk, zone, request.GET.urlencode())


class Settled(Generic[V]):
    """What settled runs show, by ``settled_key``, the ``size`` most recently used."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._kept: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def shown(self, key: Hashable | None, write: Callable[[], V]) -> V:
        """What is kept for ``key``, else ``write()``'s, kept when ``key`` is not None."""
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
