"""The disk a process behind the wall (a build, a learning) may write: a budget of bytes and
of entries (inodes) in the folders it writes on the disk every user shares.

Its memory, processes, ``/tmp`` and ``/dev/shm`` are bounded by its cgroups and tmpfs
(``wall``, ``shm``); what it writes into its folders on the store's disk (a venv, a wheel
cache, pip's temporary files) is not, and the store has no quota per folder to bound it
(``budget`` counts a task's the same way). So the wall caps one file at the budget
(``RLIMIT_FSIZE``, ``wall.enter``) and counts its folders with a bounded walk that follows no
link (``harness.untrusted.usage``): once before it starts (what they held already is not its
own), every ``check_s`` while it runs (more seldom while a count takes long: at most a tenth of
a core) and once more after its end. Over its budget, it is killed and its end says which
budget (``SIMRUN_BUILD_DISK_GB``, ``SIMRUN_BUILD_FILES_MAX``); its caller removes what it wrote.

Only the standard library and the harness: the wall imports it by its bare name.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import untrusted

GIB = 2**30
DISK_GB = 20.0
"""The bytes a build or a learning may write, in GiB (``SIMRUN_BUILD_DISK_GB``)."""
FILES_MAX = 200_000
"""The files and folders a build or a learning may make (``SIMRUN_BUILD_FILES_MAX``)."""
DEPTH_MAX = 64
"""How deep the folders it makes may nest: a walk goes no deeper."""
CHECK_S = 2.0
"""Seconds between two counts while it runs."""
SHARE_OF_A_CORE = 0.1
"""The most of a core the counting may take: the next count waits ten times the last one."""
OVER = "over its budget"
"""How the end of a process stopped for its disk begins (``wall.Ended.stopped``)."""


@dataclass(frozen=True)
class Disk:
    """What a walled process may add to the folders ``counted``: ``bytes`` (one file at most
    as many) and ``files``, counted every ``check_s``."""

    bytes: int = int(DISK_GB * GIB)
    files: int = FILES_MAX
    check_s: float = CHECK_S
    counted: list[str] = field(default_factory=list)


def outermost(folders: list[Path]) -> list[str]:
    """The folders of ``folders`` that are below none of the others (each counted once)."""
    found = sorted({str(Path(os.path.abspath(f))) for f in folders})
    return [f for f in found if not any(f.startswith(g + "/") for g in found if g != f)]


def _size(count: int) -> str:
    return f"{count / GIB:.3g} GiB" if count >= GIB else f"{count / 2**20:.3g} MiB"


class Count:
    """The counts of one walled process's folders: made before it starts (what they held),
    then ``due`` and ``over`` while it runs and after its end."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.before = self._measure(disk.files + 1)
        self._next = time.monotonic() + disk.check_s

    def _measure(self, limit: int) -> untrusted.Usage:
        counted = []
        for folder in map(Path, self.disk.counted):
            try:
                found = untrusted.usage(folder.parent, [folder.name], depth=DEPTH_MAX, limit=limit)
            except OSError:
                found = untrusted.Usage(0, 0)  # not there (yet): nothing of it
            counted.append(found)
        cut = next((u.cut for u in counted if u.cut), "")
        return untrusted.Usage(sum(u.files for u in counted), sum(u.bytes for u in counted), cut)

    def due(self) -> bool:
        """Whether the next count is due while the process runs."""
        return time.monotonic() >= self._next

    def over(self) -> str | None:
        """Count once; which budget what it wrote exceeds, in words, None within them."""
        started = time.monotonic()
        now = self._measure(self.before.files + self.disk.files + 1)
        spent = time.monotonic() - started
        self._next = time.monotonic() + max(self.disk.check_s, spent / SHARE_OF_A_CORE)
        files, size = now.files - self.before.files, now.bytes - self.before.bytes
        if now.cut.startswith("too deep"):
            return f"{OVER}: folders nested more than {DEPTH_MAX} levels deep in its folders"
        if files > self.disk.files:
            return (
                f"{OVER}: more than {self.disk.files} files and folders written in its "
                "folders (SIMRUN_BUILD_FILES_MAX)"
            )
        if size >= self.disk.bytes:  # a file the kernel stopped at the budget reaches it
            return (
                f"{OVER}: {_size(size)} written in its folders, its budget is "
                f"{_size(self.disk.bytes)} (SIMRUN_BUILD_DISK_GB)"
            )
        return None
