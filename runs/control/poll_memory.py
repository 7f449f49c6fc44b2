"""Which live runs a reconcile pass may leave alone: nothing changed since their last poll.

A poll decides from a run's record, its workflow's status, files of the store and the time.
A running run whose record (its ``version``) and workflow (the backend's ``versions``, see
``ChangeSignal``) are as at its last poll, whose unfinished split tasks' ``progress.jsonl``
did not change size, and which waits for nothing in time (a merge marker or a report within its
grace, the logs of a final task to keep, a log read that failed, a reconcile that crashed)
would be decided the same: the pass skips it, reading neither its status nor its tasks. Ended
pods of a live task change its workflow, so their logs are kept by the poll that sees the
change. Every run is still polled in full at least every ``SIMRUN_RESYNC_S``, as informers
resync, each at its own phase of that interval so the full polls spread evenly over passes.

Each poll that went through also leaves a digest of what it read and the record it left in
the run's row (``Run.polled``), so a process that does not remember the run (after a
restart, or another worker process) skips it too while its digest holds, and a restart
costs what changed meanwhile, not a poll of every run. A run whose poll left a log read owed
keeps no digest, so it is polled after a restart. What a process remembers beside (when each
run resyncs) is safe to lose.
"""

from __future__ import annotations

import hashlib
import os
import time
import weakref
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from django.conf import settings
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet

from runs.backends.base import Backend, ChangeSignal
from runs.common import store
from runs.models import FINAL_TASK_STATES, POLL_WATCHED, Run, RunState, Task


class Signature(NamedTuple):
    """What a poll of a run read, besides its record: its workflow's version and the sizes
    of its unfinished split tasks' progress files (-1 for none). Split tasks not yet running
    count too, so a task that starts does not change the signature by itself. A tuple: a
    pass makes one for every running run (a frozen dataclass cost two and a half times as
    much)."""

    workflow: str | None
    progress: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Seen:
    """A run's last poll: what it read, the record it left, when it is to be polled in full."""

    signature: Signature
    record: int
    resync_at: float


class PollMemory:
    """The last poll of each live run of one backend, in this process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, Seen] = {}
        self.signatures: dict[str, Signature] = {}
        """What this pass read before its polls, by run id: kept by ``remember``."""
        self.resyncing: set[str] = set()
        """The runs this pass polls only because their resync is due: nothing changed."""
        self.logs_owed: set[str] = set()
        """The runs whose last poll failed to read the log of an ended pod: polled again."""

    def unchanged(self, runs: Sequence[Live], due: QuerySet[Run], backend: Backend) -> set[str]:
        """The ids of the runs a pass may skip; reads the signature of every running run.

        One backend call (``versions``) and one query of the tasks that make a poll needed
        (final without kept logs, unfinished split), whatever the number of runs.
        """
        running = [r for r in runs if r.state == RunState.RUNNING and r.workflow]
        self.signatures, self.resyncing = {}, set()
        if not running:
            return set()
        versions: dict[str, str] = {}
        if isinstance(backend, ChangeSignal):
            versions = backend.versions([r.workflow for r in running])
        progress: dict[str, list[tuple[str, int]]] = defaultdict(list)
        pending_logs: set[str] = set()
        root = str(store.root())
        for run_id, task_id, state in _watched_tasks(due):
            if state in FINAL_TASK_STATES:
                pending_logs.add(run_id)
            else:
                progress[run_id].append((task_id, _size(root, run_id, task_id)))
        now = self.clock()
        self.signatures = {
            r.pk: Signature(versions.get(r.workflow), tuple(progress.get(r.pk, ())))
            for r in running
        }
        self._seen = {r.pk: self._seen[r.pk] for r in running if r.pk in self._seen}
        self._adopt(running, now)
        same = {
            run.pk
            for run in running
            if run.pk not in pending_logs
            and run.pk not in self.logs_owed
            and not run.waits
            and (seen := self._seen.get(run.pk)) is not None
            and seen.record == run.version
            and seen.signature.workflow is not None
            and seen.signature == self.signatures[run.pk]
        }
        self.resyncing = {pk for pk in same if now >= self._seen[pk].resync_at}
        return same - self.resyncing

    def _adopt(self, running: Sequence[Live], now: float) -> None:
        """Remember the runs this process has not polled whose row holds the digest of a poll
        that read what this pass reads (another process's, or this service's before a
        restart), each to resync at its own phase from now."""
        resync_s = settings.SIMRUN_RESYNC_S
        for run in running:
            signature = self.signatures[run.pk]
            if (
                run.pk not in self._seen
                and run.polled
                and run.polled == digest(signature, run.version)
            ):
                self._seen[run.pk] = Seen(signature, run.version, resync_at(run.pk, now, resync_s))

    def resync_only(self, run: Run, written: bool) -> bool:
        """Whether a run was polled only for its resync and its poll wrote nothing: its
        backend's side (keeping the logs of ended pods) has nothing new to do, as a pod that
        ends changes its workflow, so it is left out (an informer's resync calls no API)."""
        return not written and run.pk in self.resyncing

    def owe_logs(self, run_id: str, owed: bool) -> None:
        """Note whether a run's poll left a log read to try again: such a run is not skipped."""
        if owed:
            self.logs_owed.add(run_id)
        else:
            self.logs_owed.discard(run_id)

    def remember(self, runs: Iterable[Run]) -> None:
        """Remember the polls of runs that went through, with the records they left, here
        and in each run's row (``Run.polled``: one statement for those whose digest changed;
        none where a log read is owed)."""
        resync_s = settings.SIMRUN_RESYNC_S
        now = self.clock()
        changed: list[Run] = []
        for run in runs:
            if (signature := self.signatures.get(run.pk)) is None:
                continue
            self._seen[run.pk] = Seen(signature, run.version, resync_at(run.pk, now, resync_s))
            polled = "" if run.pk in self.logs_owed else digest(signature, run.version)
            if run.polled != polled:
                run.polled = polled
                changed.append(run)
        if changed:
            # Only this column: the record's version stays, so the digest holds for the next
            # pass, and a writer meanwhile changes the version and so breaks the digest.
            Run.objects.bulk_update(changed, ["polled"])


def digest(signature: Signature, record: int) -> str:
    """What ``Run.polled`` holds: 16 hex digits of a poll's signature and the record's version."""
    text = repr((signature.workflow, signature.progress, record)).encode()
    return hashlib.blake2b(text, digest_size=8).hexdigest()


def resync_at(run_id: str, now: float, resync_s: float) -> float:
    """When a run polled at ``now`` is next polled in full: the next point of its own phase
    of the interval (from its id), within ``resync_s`` of ``now``. The phases spread evenly
    over the whole interval, so each pass carries its share of the resyncs (a twelfth for a
    5 s pass and 60 s), however many runs were polled together (at a restart, all)."""
    phase = resync_s * (zlib.crc32(run_id.encode()) % 4096) / 4096
    return now - (now - phase) % resync_s + resync_s


class Live(Protocol):
    """What decides whether a live run may be skipped: a row of ``live_rows``."""

    pk: str
    state: str
    workflow: str
    version: int
    polled: str
    waits: bool
    """Whether it waits for a merge marker or a report, or its last reconcile crashed."""


FIELDS = ("pk", "state", "workflow", "version", "polled")
"""The fields of a ``Live`` row: a pass reads these of every run, the rest of those it polls."""

WAITS = Q(reconcile_failures__gt=0) | ~Q(merge_pending={}) | ~Q(reports_pending={})
"""A run that waits for something in time, decided by the database: a pass then decodes no
JSON of the runs it skips (a third of a steady pass's time at 10,000 runs)."""


def live_rows(due: QuerySet[Run]) -> list[Any]:
    """The ``FIELDS`` and ``waits`` of the due runs as rows, oldest first: what deciding the
    skips needs."""
    waits = ExpressionWrapper(WAITS, output_field=BooleanField())
    found = due.order_by("created_at").annotate(waits=waits)
    return list(found.values_list(*FIELDS, "waits", named=True))


_memories: weakref.WeakKeyDictionary[Backend, PollMemory] = weakref.WeakKeyDictionary()


def memory_of(backend: Backend | None) -> PollMemory | None:
    """The poll memory of a backend that signals changes; None for one that does not."""
    if backend is None or not isinstance(backend, ChangeSignal):
        return None
    if backend not in _memories:
        _memories[backend] = PollMemory()
    return _memories[backend]


def _watched_tasks(due: QuerySet[Run]) -> list[tuple[str, str, str]]:
    """(run id, task id, state) of the due runs' tasks that make a poll needed or whose
    progress a poll may read: final ones whose logs are not kept, unfinished split ones."""
    rows = Task.objects.filter(POLL_WATCHED, run__in=due.values("pk"))
    return list(rows.order_by("run_id", "position").values_list("run_id", "task_id", "state"))


def _size(root: str, run_id: str, task_id: str) -> int:
    """The size of a task's ``progress.jsonl`` (``store.task_dir``), -1 without one."""
    try:
        path = f"{root}/runs/{run_id}/tasks/{task_id}/progress.jsonl"
        return os.stat(path, follow_symlinks=False).st_size  # the task may have planted a link
    except OSError:
        return -1
