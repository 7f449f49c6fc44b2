"""The budget of one task's files on the local backend: the entries (inodes) and bytes of its
folder in the store, of its scratch and of what is beside its run's task folders (its task
user may write in its run's folder too) together, and how deep their folders nest. Its
``/tmp``, ``/var/tmp`` and ``/dev/shm`` are its own tmpfs, counted in its memory and gone
with it (``shm``).

The kernel caps one file: the task's processes run with ``RLIMIT_FSIZE`` at the bytes budget
(``wall.enter``).
The rest needs a filesystem quota per folder, which a store on an ordinary disk (or a kernel
built without ``CONFIG_QUOTA``) does not have, so the task's launcher counts, with a bounded
walk that follows no link (``harness.untrusted.usage``): every ``check_s`` while the task runs,
more seldom while counting takes long (it spends at most a tenth of a core), and once more at
its end. A task over a budget is killed and fails with a message naming it, and what it wrote
is removed (its folder but for the service's files, and its scratch), so that the disk it
shares with every other user is given back.

The running tasks of one user share a budget too (``UserBudget``): each launcher keeps its last
count in the user's ``Ledger`` and sums the others' there, so a user's many tasks, each within
its own budget, cannot take the disk together.

Only the standard library, the harness and its sibling ``pids``: the launcher imports it from its
directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import untrusted

if __package__:  # imported as a module of the service
    from runs.backends.local.pids import process_start
else:  # imported by its bare name: by the launcher, from this directory
    from pids import process_start  # type: ignore[no-redef]

SERVICE_ENTRIES = frozenset({"logs", "recorded"})
"""The folders of a task's folder that are the service's, not the task's: never counted."""
KEPT_ENTRIES = SERVICE_ENTRIES | {"task.json"}
"""What stays of a task's folder when what it wrote over its budget is removed."""
SHARE_OF_A_CORE = 0.1
"""The most of a core the counting may take: the next count waits ten times the last one."""
GIB = 2**30


@dataclass(frozen=True)
class Budget:
    """What one task may keep in its folder and scratch."""

    files: int
    bytes: int
    depth: int
    check_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Budget:
        return cls(int(data["files"]), int(data["bytes"]), int(data["depth"]), data["check_s"])

    def too_large_a_file(self) -> str:
        return f"over its budget: a file larger than {_size(self.bytes)} (SIMRUN_TASK_DISK_GB)"


def _size(count: int) -> str:
    return f"{count / GIB:.3g} GiB" if count >= GIB else f"{count / 2**20:.3g} MiB"


RUN_ENTRIES = frozenset({"tasks", "run.json"})
"""What of a run's folder is not written beside its tasks' folders: counted by each task."""


def measure(
    budget: Budget,
    store: Path,
    task: tuple[str, ...],
    scratch: Path,
    siblings: frozenset[str] = frozenset(),
) -> untrusted.Usage:
    """The entries and bytes of a task's folder and scratch together, and of what is beside
    the run's task folders (in the run's folder and in its ``tasks/``: the task user writes
    there too; ``siblings`` are the run's task folders, each counted by its own task), counted
    to one past its budget of files (``cut`` says why a count stopped short)."""
    run, tasks = task[:2], task[:3]
    limit = budget.files + 1
    counted = [
        _usage(budget, store, task, limit, SERVICE_ENTRIES),
        _usage(budget, store, run, limit, RUN_ENTRIES),
        _usage(budget, store, tasks, limit, siblings | {task[-1]}),
        _usage(budget, scratch.parent, (scratch.name,), limit, frozenset()),
    ]
    return untrusted.Usage(
        sum(u.files for u in counted),
        sum(u.bytes for u in counted),
        next((u.cut for u in counted if u.cut), ""),
    )


def exceeded(budget: Budget, usage: untrusted.Usage) -> str | None:
    """Which budget of one task a count of its files exceeds, in words; None within them."""
    files, size, cut = usage.files, usage.bytes, usage.cut
    if cut.startswith("too deep"):
        return (
            f"over its budget: folders nested more than {budget.depth} levels deep in its folder "
            "or scratch (SIMRUN_TASK_DEPTH_MAX)"
        )
    if files > budget.files:
        return (
            f"over its budget: more than {budget.files} files and folders in its folder and "
            "scratch (SIMRUN_TASK_FILES_MAX)"
        )
    if size >= budget.bytes:  # a file the kernel stopped at the budget reaches it
        return (
            f"over its budget: {_size(size)} in its folder and scratch, its budget is "
            f"{_size(budget.bytes)} (SIMRUN_TASK_DISK_GB)"
        )
    return None


def _usage(
    budget: Budget, base: Path, parts: tuple[str, ...], limit: int, skip: frozenset[str]
) -> untrusted.Usage:
    try:
        return untrusted.usage(base, parts, depth=budget.depth, limit=limit, skip=skip)
    except OSError:
        return untrusted.Usage(0, 0)  # not there (yet), or replaced by a link: nothing of it


@dataclass(frozen=True)
class UserBudget:
    """What the running tasks of one user may hold together in their folders and scratches
    (``SIMRUN_USER_FILES_MAX``, ``SIMRUN_USER_DISK_GB``)."""

    files: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


LEDGER_ENTRIES = 4096
"""The most entries of a user's ledger read by one count (a user's running tasks are fewer:
each takes a core)."""
LEDGER_ENTRY_BYTES = 4096
"""The most read of one entry."""


class Ledger:
    """The last count of each running task of one user, a small file each in a folder of the
    service's (``<store>/local/usage/<owner>/``), written by the task's launcher at each of its
    counts and removed at its end; one of a launcher that died is passed over (its process is
    gone) and removed.

    Summing the ledger costs one small read per running task of the user, never a walk of
    another task's files: each task's own launcher counts them, as for its own budget. A task
    whose count grew while its user's running tasks together hold more than the budget is over
    it (the one that pushed them past it, or one that grows on while they are): a task that
    holds what it holds is never failed by another's growth."""

    def __init__(self, budget: UserBudget, folder: Path, entry: str) -> None:
        self.budget, self.folder, self.entry = budget, folder, entry
        self.last = untrusted.Usage(0, 0)
        self.me = {"pid": os.getpid(), "start": process_start(os.getpid())}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ledger:
        """The ledger of a launch file's ``user_budget``: the budget, ``ledger`` and ``entry``."""
        budget = UserBudget(int(data["files"]), int(data["bytes"]))
        return cls(budget, Path(data["ledger"]), str(data["entry"]))

    def over(self, usage: untrusted.Usage) -> str | None:
        """Record this task's count; which budget of its user the running tasks exceed
        together if this task grew, in words; None otherwise."""
        grew = usage.files > self.last.files or usage.bytes > self.last.bytes
        self.last = usage
        try:
            with untrusted.directory(self.folder) as folder:
                record = {"files": usage.files, "bytes": usage.bytes, **self.me}
                untrusted.write_atomic_at(folder, self._name, json.dumps(record), mode=0o600)
                files, size = self._sum(folder)
        except OSError:
            return None  # no ledger (a full disk, a folder gone): the task's own budget holds
        if not grew:
            return None
        budget = self.budget
        if files > budget.files:
            return (
                f"over its user's budget: the running tasks of its user hold more than "
                f"{budget.files} files and folders together (SIMRUN_USER_FILES_MAX)"
            )
        if size > budget.bytes:
            return (
                f"over its user's budget: the running tasks of its user hold {_size(size)} "
                f"together, the budget is {_size(budget.bytes)} (SIMRUN_USER_DISK_GB)"
            )
        return None

    def leave(self) -> None:
        """Remove this task's count (at its end)."""
        with contextlib.suppress(OSError), untrusted.directory(self.folder) as folder:
            os.unlink(self._name, dir_fd=folder)

    @property
    def _name(self) -> str:
        return f"{self.entry}.json"

    def _sum(self, folder: int) -> tuple[int, int]:
        """The files and bytes of the user's running tasks, as their last counts say."""
        files = size = 0
        for entry in untrusted.entries(folder, LEDGER_ENTRIES):
            if not entry.is_file or not entry.name.endswith(".json"):
                continue
            try:
                fd = os.open(entry.name, untrusted.FILE_FLAGS, dir_fd=folder)
                with os.fdopen(fd, "rb") as handle:
                    record = json.loads(handle.read(LEDGER_ENTRY_BYTES))
                pid, start = int(record["pid"]), record["start"]
                if entry.name != self._name and process_start(pid) != start:
                    os.unlink(entry.name, dir_fd=folder)  # its launcher died: no task of it
                    continue
                files += int(record["files"])
                size += int(record["bytes"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being replaced, or removed at its task's end
        return files, size


def remove_written(
    store: Path, task: tuple[str, ...], siblings: frozenset[str] = frozenset()
) -> None:
    """Remove what a task wrote in its folder (all but the service's files), however deep,
    and what is beside the run's task folders (``measure``)."""
    for parts, kept in (
        (task, KEPT_ENTRIES),
        (task[:2], RUN_ENTRIES),
        (task[:3], siblings | {task[-1]}),
    ):
        with contextlib.suppress(OSError), untrusted.directory(store, parts) as folder:
            for entry in untrusted.entries(folder):
                if entry.name not in kept:
                    untrusted.remove_tree(folder, [entry.name])


class Watch:
    """A thread that counts a task's files while it runs and calls ``kill`` once, when the
    task is found over a budget; ``over`` says which. ``done`` is called after the last count."""

    def __init__(
        self,
        budget: Budget,
        count: Callable[[], str | None],
        kill: Callable[[], None],
        done: Callable[[], None] | None = None,
    ) -> None:
        self.budget = budget
        self.count = count
        self.kill = kill
        self.done = done
        self.over: str | None = None
        self._pause = budget.check_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simrun-budget", daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self._pause):
            if self.check():
                self.kill()
                return

    def check(self) -> bool:
        """Count once; whether the task is over a budget."""
        started = time.monotonic()
        found = self.count()
        self._pause = max(self.budget.check_s, (time.monotonic() - started) / SHARE_OF_A_CORE)
        if found is not None and self.over is None:
            self.over = found
        return self.over is not None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> str | None:
        """End the thread, count once more (what the task wrote last); the budget exceeded."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        self.check()
        if self.done is not None:
            self.done()
        return self.over
