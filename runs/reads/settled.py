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

from collections.abc import Callable, Hashable
from typing import TypeVar

from django.http import HttpRequest
from django.utils import timezone

from runs.common.kept import Kept
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


def shown(kept: Kept[V], run: Run, request: HttpRequest, write: Callable[[], V]) -> V:
    """What ``run`` shows ``request``: kept in ``kept`` for a settled run, else written anew."""
    key = settled_key(run, request)
    return write() if key is None else kept.get(key, write)
