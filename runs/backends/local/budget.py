"""The budget of one task's files on the local backend: the entries (inodes) and bytes of its
folder in the store and of its scratch together, and how deep their folders nest.

The kernel caps one file: the task's processes run with ``RLIMIT_FSIZE`` at the bytes budget.
The rest needs a filesystem quota per folder, which a store on an ordinary disk (or a kernel
built without ``CONFIG_QUOTA``) does not have, so the task's launcher counts, with a bounded
walk that follows no link (``harness.untrusted.usage``): every ``check_s`` while the task runs,
more seldom while counting takes long (it spends at most a tenth of a core), and once more at
its end. A task over a budget is killed and fails with a message naming it, and what it wrote
is removed (its folder but for the service's files, and its scratch), so that the disk it
shares with every other user is given back.

Only the standard library and the harness: the launcher imports it from its directory.
"""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import untrusted

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

    def limit_file_size(self) -> None:
        """No file of this process (and its children) may grow beyond the bytes budget."""
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.bytes, self.bytes))

    def too_large_a_file(self) -> str:
        return f"over its budget: a file larger than {_size(self.bytes)} (SIMRUN_TASK_DISK_GB)"


def _size(count: int) -> str:
    return f"{count / GIB:.3g} GiB" if count >= GIB else f"{count / 2**20:.3g} MiB"


def overrun(budget: Budget, store: Path, task: tuple[str, ...], scratch: Path) -> str | None:
    """Which budget a task's folder and scratch exceed, in words; None within them all."""
    folder = _usage(budget, store, task, budget.files + 1, SERVICE_ENTRIES)
    rest = max(1, budget.files + 1 - folder.files)
    own = _usage(budget, scratch.parent, (scratch.name,), rest, frozenset())
    files, size = folder.files + own.files, folder.bytes + own.bytes
    cut = folder.cut or own.cut
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


def remove_written(store: Path, task: tuple[str, ...]) -> None:
    """Remove what a task wrote in its folder (all but the service's files), however deep."""
    with contextlib.suppress(OSError), untrusted.directory(store, task) as folder:
        for entry in untrusted.entries(folder):
            if entry.name not in KEPT_ENTRIES:
                untrusted.remove_tree(folder, [entry.name])


class Watch:
    """A thread that counts a task's files while it runs and calls ``kill`` once, when the
    task is found over a budget; ``over`` says which."""

    def __init__(
        self,
        budget: Budget,
        count: Callable[[], str | None],
        kill: Callable[[], None],
    ) -> None:
        self.budget = budget
        self.count = count
        self.kill = kill
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
        return self.over
