"""Which live runs a reconcile pass may leave alone: nothing changed since their last poll.

A poll decides from a run's record, its workflow's status, files of the store and the time.
A running run whose record (its ``version``) and workflow (the backend's ``versions``, see
``ChangeSignal``) are as at its last poll, whose unfinished split tasks' ``progress.jsonl``
did not change size, and which waits for nothing in time (a merge marker or a report within its
grace, the logs of a final task to keep, a log read that failed, a reconcile that crashed)
would be decided the same: the pass skips it, reading neither its status nor its tasks. Ended
pods of a live task change its workflow, so their logs are kept by the poll that sees the
change.

A pass reads what changed, not every live run: the rows written since the last read (their
``updated_at``, with ``WRITE_SLACK`` for a write that committed late), those it polled
before, and those that wait; the tasks it watches again only for a run whose record changed
or that it read again. What a pass could miss so (a write stamped earlier than the slack, a
task written without its run) it finds at the resync, as an informer's resync replays its
cache: the passes read the live runs again in order of creation, each a share as large as
the time since the last pass is of ``SIMRUN_RESYNC_S``, so every run's row and tasks are read
again within that interval, and the run is polled if they changed. The backends' ``versions``
are read at every pass: one call for all runs.

Each poll that went through also leaves a digest of what it read and the record it left in
the run's row (``Run.polled``), so a process that does not remember the run (after a
restart, or another worker process) skips it too while its digest holds, and a restart
costs what changed meanwhile, not a poll of every run. A run whose poll left a log read owed
keeps no digest, so it is polled after a restart. What a process remembers beside is safe
to lose.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from django.conf import settings
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet

from runs.backends.base import Backend, ChangeSignal
from runs.common import store
from runs.models import FINAL_TASK_STATES, LIVE, POLL_WATCHED, WAITS, Run, RunState, Task


class Signature(NamedTuple):
    """What a poll of a run read, besides its record: its workflow's version and the sizes
    of its unfinished split tasks' progress files (-1 for none), in the order of ``split``.
    Split tasks not yet running count too, so a task that starts does not change the
    signature by itself. A tuple: a frozen dataclass cost two and a half times as much."""

    workflow: str | None
    split: tuple[str, ...]
    sizes: tuple[int, ...]


class Seen(NamedTuple):
    """A run's last poll: what it read and the record it left."""

    signature: Signature
    record: int


class Watched(NamedTuple):
    """What a pass watches of a run's tasks, as read at a version of its record: whether a
    final task's logs are still to keep, and its unfinished split tasks (their progress)."""

    version: int
    pending_logs: bool
    split: tuple[str, ...]


class Quiet(NamedTuple):
    """A run the last pass left alone, and what it compared: its workflow's name and version
    and its unfinished split tasks' progress files (their paths and sizes)."""

    workflow: str
    version: str
    paths: tuple[str, ...]
    sizes: tuple[int, ...]


class PollMemory:
    """The last poll of each live run of one backend, and the live runs' rows as last read,
    in this process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, Seen] = {}
        self._rows: dict[str, Any] = {}
        """The ``live_rows`` of the live runs, by id, oldest first, as last read."""
        self._read_at: datetime | None = None
        self.reread: set[str] = set()
        """The runs whose rows and watched tasks the next pass reads again: those polled."""
        self._rereading: set[str] = set()
        """The runs whose watched tasks this pass reads again."""
        self._walk_parts: list[QuerySet[Run]] = []
        """The runs this pass read in the resync's walk (or, at first, every live run), as
        queries: their tasks are read through them, not through a list of their ids."""
        self._walked_now: set[str] = set()
        """The ids of those runs."""
        self._resynced_at = 0.0
        """When the last pass read its share of the resync (``clock``)."""
        self._resync_from: tuple[datetime, str] | None = None
        """The creation time and id of the last run the resync read: the next share reads on."""
        self._resync_owed = 0.0
        """The part of a run the passes owe the resync: a pass reads whole runs."""
        self._walked: set[str] = set()
        """The runs the resync's walk read since it began."""
        self._watched: dict[str, Watched] = {}
        self._quiet: dict[str, Quiet] = {}
        """The runs the last pass left alone: the next compares only their workflows'
        versions and progress sizes, unless their rows or tasks were read again."""
        self._fresh: set[str] = set()
        """The runs whose rows this pass read (or found gone)."""
        self.signatures: dict[str, Signature] = {}
        """What this pass read before its polls, by run id: kept by ``remember``."""
        self.logs_owed: set[str] = set()
        """The runs whose last poll failed to read the log of an ended pod: polled again."""

    def due_rows(self, now: datetime) -> list[Any]:
        """The ``live_rows`` of the live runs a pass takes (not pushed aside), oldest first.

        The first pass of a process reads every live run; later ones only the rows written
        since the read before (``WRITE_SLACK`` earlier), those of ``reread``, those that
        wait (``WAITS``), each through an index, and the resync's share (``_resync``): a pass
        costs what changed. The tasks of the runs read again are read again too.
        """
        clock = self.clock()
        self._fresh = set()
        if self._read_at is None:
            self._rows = {row.pk: row for row in live_rows(Run.objects.live())}
            self._fresh = set(self._rows)
            self._rereading = self._walked_now = set(self._rows)
            self._walk_parts = [Run.objects.live()]
            self._resynced_at, self._resync_from, self._walked = clock, None, set()
        else:
            self._read_changed()
            self._walk_parts = []
            self._rereading = self.reread | self._resync(clock)
        self._read_at, self.reread = now, set()
        return [
            row
            for row in self._rows.values()
            if row.reconcile_after is None or row.reconcile_after <= now
        ]

    def _read_changed(self) -> None:
        """Bring the kept rows up to date with the runs written since the last read, those
        of ``reread`` and those that wait; forget those no longer live."""
        assert self._read_at is not None
        changed = Run.objects.filter(
            Q(updated_at__gte=self._read_at - WRITE_SLACK) | Q(pk__in=self.reread) | (LIVE & WAITS)
        )
        found = set()
        for row in live_rows(changed):
            found.add(row.pk)
            self._keep(row)
        for pk in self.reread - found:  # deleted
            self._rows.pop(pk, None)
            self._fresh.add(pk)

    def _resync(self, clock: float) -> set[str]:
        """Read again the next live runs in order of creation, as many as the time since the
        last pass is a share of ``SIMRUN_RESYNC_S``, from where the last pass stopped: every
        run is read again within the interval, and each pass carries its share, not a list
        of ids. At the end of the live runs, the kept ones the walk did not find are read
        again (``_check_unwalked``). Their ids."""
        share = min(1.0, (clock - self._resynced_at) / settings.SIMRUN_RESYNC_S)
        self._resynced_at = clock
        self._resync_owed = min(len(self._rows), self._resync_owed + len(self._rows) * share)
        wanted = math.floor(self._resync_owed)
        self._resync_owed -= wanted
        read = self._walked_now = set()
        while wanted > 0:
            start = self._resync_from
            runs = walk_after(start)
            found = live_rows(runs, limit=wanted)
            self._walk_parts.append(runs.order_by("created_at", "pk")[:wanted])
            for row in found:
                read.add(row.pk)
                self._keep(row)
            self._walked |= read
            wanted -= len(found)
            if wanted == 0:
                self._resync_from = (found[-1].created_at, found[-1].pk)
                break
            self._resync_from = None  # the end of the live runs: the walk begins again
            self._check_unwalked(read)
            if start is None:
                break  # every live run read
        return read

    def _check_unwalked(self, read: set[str]) -> None:
        """At the end of a walk, read again the kept runs it did not find (live again behind
        it, or no longer live) and forget those no longer live or gone."""
        unwalked = set(self._rows) - self._walked - read
        self._walked = set()
        found = live_rows(Run.objects.filter(pk__in=unwalked)) if unwalked else []
        for row in found:
            self._keep(row)
        for pk in unwalked - {row.pk for row in found}:
            del self._rows[pk]
            self._fresh.add(pk)

    def _keep(self, row: Any) -> None:
        """Keep a row read of a run, or forget the run if it is no longer live."""
        self._fresh.add(row.pk)
        if row.is_live:
            self._rows[row.pk] = row
        else:
            self._rows.pop(row.pk, None)

    def unchanged(self, runs: Sequence[Live], backend: Backend) -> set[str]:
        """The ids of the runs a pass may skip.

        One backend call (``versions``), a ``stat`` of each unfinished split task's progress,
        and one query of the tasks of the runs whose record changed or that are read again.
        A run the last pass left alone whose row and tasks were not read again costs only
        the comparison of its workflow's version and its progress sizes (``_keep_quiet``);
        the rest are decided in full (``_decide``).
        """
        state = RunState.RUNNING  # looked up once: an enum's member costs a lookup each time
        running = [r for r in runs if r.state == state and r.workflow]
        self.signatures = {}
        if not running:
            self._quiet = {}
            return set()
        versions: dict[str, str] = {}
        if isinstance(backend, ChangeSignal):
            versions = backend.versions([r.workflow for r in running])
        self._keep_quiet(versions)
        quiet = self._quiet
        others = [r for r in running if r.pk not in quiet]
        if len(self._seen) > len(running):  # some ended: forget them
            self._seen = {r.pk: self._seen[r.pk] for r in running if r.pk in self._seen}
        quiet.update(self._decide(others, versions, self._watched_of(others, running)))
        return set(quiet)

    def _keep_quiet(self, versions: dict[str, str]) -> None:
        """Keep of the runs the last pass left alone those whose rows and tasks were not
        read again and whose workflows' versions and progress sizes are as then: a tight
        loop, since a steady pass makes it for nearly every live run."""
        touched = self._fresh | self._rereading | self.logs_owed
        version_of, moved = versions.get, []
        for pk, (workflow, version, paths, sizes) in self._quiet.items():
            if (
                pk in touched
                or version_of(workflow) != version
                or (paths and tuple([_size(path) for path in paths]) != sizes)
            ):
                moved.append(pk)
        for pk in moved:
            del self._quiet[pk]

    def _decide(
        self, runs: Sequence[Live], versions: dict[str, str], watched: dict[str, Watched]
    ) -> dict[str, Quiet]:
        """Of the running runs not kept quiet, those as at their last poll (here, or as
        their rows' digests say) and waiting for nothing; a signature for each of the
        rest (``signatures``), which the pass polls."""
        root, seen_runs, signatures = str(store.root()), self._seen, self.signatures
        logs_owed, same = self.logs_owed, {}
        for run in runs:
            pk, tasks = run.pk, watched[run.pk]
            paths = tuple([_progress_path(root, pk, task) for task in tasks.split])
            sizes = tuple([_size(path) for path in paths])
            workflow = versions.get(run.workflow)
            seen = seen_runs.get(pk)
            if (  # not as at its last poll here: a signature is made, else that one holds
                seen is None
                or seen.record != run.version
                or (signature := seen.signature).workflow != workflow
                or signature.sizes != sizes
                or signature.split != tasks.split
            ):
                signature = Signature(workflow, tasks.split, sizes)
                if (
                    seen is not None
                    or not run.polled
                    or run.polled != digest(signature, run.version)
                ):
                    signatures[pk] = signature
                    continue
                seen_runs[pk] = Seen(signature, run.version)  # as another process polled it
            if (
                workflow is not None
                and not tasks.pending_logs
                and not run.waits
                and pk not in logs_owed
            ):
                same[pk] = Quiet(run.workflow, workflow, paths, sizes)
            else:
                signatures[pk] = signature
        return same

    def _watched_of(self, runs: Sequence[Live], running: Sequence[Live]) -> dict[str, Watched]:
        """The watched tasks of each of ``runs``: kept from an earlier pass while its record
        is as then and it is not read again, else read (``_watched_tasks``). Those of runs
        no longer ``running`` are forgotten."""
        stale = {
            r.pk
            for r in runs
            if (known := self._watched.get(r.pk)) is None
            or known.version != r.version
            or r.pk in self._rereading
        }
        found: dict[str, tuple[bool, list[str]]] = {}
        by_id = stale - self._walked_now if self._walk_parts else stale
        rows = _watched_tasks(by_id, self._walk_parts, stale) if stale else []
        for run_id, task_id, state in rows:
            pending, split = found.setdefault(run_id, (False, []))
            if state in FINAL_TASK_STATES:
                found[run_id] = (True, split)
            else:
                split.append(task_id)
        for r in runs:
            if r.pk in stale:
                pending, split = found.get(r.pk, (False, []))
                self._watched[r.pk] = Watched(r.version, pending, tuple(split))
        if len(self._watched) > len(running):  # some ended: forget them
            self._watched = {r.pk: w for r in running if (w := self._watched.get(r.pk))}
        return self._watched

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
        changed: list[Run] = []
        for run in runs:
            if (signature := self.signatures.get(run.pk)) is None:
                continue
            self._seen[run.pk] = Seen(signature, run.version)
            polled = "" if run.pk in self.logs_owed else digest(signature, run.version)
            if run.polled != polled:
                run.polled = polled
                changed.append(run)
        if changed:
            # Only this column: the record's version stays, so the digest holds for the next
            # pass, and a writer meanwhile changes the version and so breaks the digest.
            Run.objects.bulk_update(changed, ["polled"])


WRITE_SLACK = timedelta(seconds=30)
"""How much earlier than the last read a pass reads the rows written: a write is stamped
(``updated_at``) before it commits, and by another process's clock."""


def digest(signature: Signature, record: int) -> str:
    """What ``Run.polled`` holds: 16 hex digits of a poll's signature and the record's version."""
    progress = tuple(zip(signature.split, signature.sizes, strict=True))  # as ever written
    text = repr((signature.workflow, progress, record)).encode()
    return hashlib.blake2b(text, digest_size=8).hexdigest()


class Live(Protocol):
    """What decides whether a live run may be skipped: a row of ``live_rows``."""

    pk: str
    state: str
    workflow: str
    version: int
    polled: str
    reconcile_after: datetime | None
    created_at: datetime
    is_live: bool
    waits: bool
    """Whether it waits for a merge marker or a report, or its last reconcile crashed."""


FIELDS = ("pk", "state", "workflow", "version", "polled", "reconcile_after", "created_at")
"""The fields of a ``Live`` row: a pass reads these of every run it reads, the rest of those
it polls."""


def live_rows(runs: QuerySet[Run], limit: int | None = None) -> list[Any]:
    """The ``FIELDS``, ``is_live`` and ``waits`` of runs as rows, oldest first (the first
    ``limit``): what deciding the skips needs. Both flags are decided by the database, so a
    pass decodes no JSON of the runs it skips (a third of a steady pass's time at 10,000)."""
    found = runs.order_by("created_at", "pk").annotate(
        is_live=ExpressionWrapper(LIVE, output_field=BooleanField()),
        waits=ExpressionWrapper(WAITS, output_field=BooleanField()),
    )
    return list(found.values_list(*FIELDS, "is_live", "waits", named=True)[:limit])


_memories: weakref.WeakKeyDictionary[Backend, PollMemory] = weakref.WeakKeyDictionary()


def memory_of(backend: Backend | None) -> PollMemory | None:
    """The poll memory of a backend that signals changes; None for one that does not."""
    if backend is None or not isinstance(backend, ChangeSignal):
        return None
    if backend not in _memories:
        _memories[backend] = PollMemory()
    return _memories[backend]


def walk_after(start: tuple[datetime, str] | None) -> QuerySet[Run]:
    """The live runs after ``start`` (a run's creation time and id; None: from the first) in
    the resync's order. The range on the creation time lets the live runs' index start
    there: the keyset's ``or`` alone had each share scan the walk from its first run."""
    runs = Run.objects.live()
    if start is None:
        return runs
    at, pk = start
    return runs.filter(Q(created_at__gt=at) | Q(created_at=at, pk__gt=pk), created_at__gte=at)


def _watched_tasks(
    runs: set[str], parts: list[QuerySet[Run]], wanted: set[str]
) -> list[tuple[str, str, str]]:
    """(run id, task id, state) of the ``wanted`` runs' tasks that make a poll needed or
    whose progress a poll may read (``POLL_WATCHED``): of the runs by their ids, and of those
    each query of ``parts`` selects."""
    rows = Task.objects.filter(POLL_WATCHED)
    queries = [rows.filter(run__in=part.values("pk")) for part in parts]
    if runs:
        queries.append(rows.filter(run_id__in=runs))
    found = (
        row
        for query in queries
        for row in query.values_list("run_id", "task_id", "state").order_by("run_id", "position")
        if row[0] in wanted
    )
    return list(dict.fromkeys(found))  # a run two parts of a walk selected, once


def _progress_path(root: str, run_id: str, task_id: str) -> str:
    """The path of a task's ``progress.jsonl`` (``store.task_dir``)."""
    return f"{root}/runs/{run_id}/tasks/{task_id}/progress.jsonl"


def _size(path: str) -> int:
    """The size of a progress file, -1 without one."""
    try:
        return os.stat(path, follow_symlinks=False).st_size  # the task may have planted a link
    except OSError:
        return -1
