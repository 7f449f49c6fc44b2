"""Memory and pids cgroups for the processes of the local backend: one per process, with its
limits.

Which hierarchy the machine has is found at run time: the cgroup v2 unified hierarchy, or the
v1 memory controller. A cgroup of its own per process, below the cgroup of the service, makes
a kill for memory real and proven as on a pod: the count of the out of memory killer of that
cgroup (``memory.events`` on v2, ``memory.oom_control`` on v1) is the only evidence of it.

Only the standard library (and the harness's own stdlib-only ``harness.cgroups``, for finding
this process's cgroup): the launcher imports this module without the service's packages.

A pids cgroup (``pids.max``) caps how many processes a task may have, so a fork bomb stays
inside its task: on cgroup v2 it is the same directory as the memory cgroup; on v1 one of
the ``pids`` hierarchy. Without a pids controller the launcher sets ``RLIMIT_NPROC``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
PAGE = os.sysconf("SC_PAGE_SIZE")
SUBTREE = "simrun"
"""The cgroup below the service's own that holds the cgroups of the processes."""


@dataclass(frozen=True)
class Hierarchy:
    """Where the cgroups of the processes go: v1 or v2, and the directory that holds them."""

    version: int
    parent: Path

    @property
    def limit_file(self) -> str:
        return "memory.max" if self.version == 2 else "memory.limit_in_bytes"


def own_cgroup(proc: Path = PROC) -> tuple[int, Path] | None:
    """The memory cgroup of this process as (version, directory), None without one.

    Found as the harness finds a pod's (``harness.cgroups.find``): the v1 memory controller
    wins where both are mounted (a hybrid machine binds memory to v1). Imported here, not at
    the top, so the launcher, which imports this module, stays quick to start.
    """
    from harness.cgroups import find

    found = find("memory", proc)
    return None if found is None else (found.version, found.path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _enable_memory(directory: Path) -> None:
    """Let the children of a v2 cgroup have memory limits (``+memory`` in its subtree control)."""
    if "memory" not in _read(directory / "cgroup.subtree_control").split():
        (directory / "cgroup.subtree_control").write_text("+memory")


def detect(proc: Path = PROC) -> Hierarchy | None:
    """The hierarchy in which this process can create memory cgroups with a limit, or None.

    The subtree ``simrun`` below the process's own cgroup is created and a probe cgroup with a
    limit is made and removed in it; any refusal (no root, a read-only mount, a v2 cgroup with
    processes that cannot delegate memory) means memory cannot be enforced here.
    """
    try:
        own = own_cgroup(proc)
        if own is None:
            return None
        version, directory = own
        hierarchy = Hierarchy(version, directory / SUBTREE)
        if version == 2:
            _enable_memory(directory)
        hierarchy.parent.mkdir(exist_ok=True)
        if version == 2:
            _enable_memory(hierarchy.parent)
        probe = create(hierarchy, f"probe-{os.getpid()}", 64 * 2**20)
        remove(probe)
    except OSError:
        return None
    return hierarchy


def create(hierarchy: Hierarchy, name: str, limit_bytes: int) -> Path:
    """A cgroup ``name`` with a memory limit (whole pages, at least ``limit_bytes``) and no swap
    beyond it; an existing one is reused."""
    path = hierarchy.parent / name
    path.mkdir(exist_ok=True)
    # Up to whole pages: the kernel rounds a limit down, and a process sized by the limit it
    # reads (the harness's pool) must see at least the memory of its plan.
    limit_bytes = -(-limit_bytes // PAGE) * PAGE
    (path / hierarchy.limit_file).write_text(str(limit_bytes))
    swap = path / ("memory.swap.max" if hierarchy.version == 2 else "memory.memsw.limit_in_bytes")
    if swap.exists():
        # Without swap accounting there is no swap to escape the limit into.
        with contextlib.suppress(OSError):
            swap.write_text("0" if hierarchy.version == 2 else str(limit_bytes))
    return path


def join(path: Path, pid: int = 0) -> None:
    """Move a process (this one for 0) into a cgroup."""
    (path / "cgroup.procs").write_text(str(pid or os.getpid()))


def oom_kills(path: Path) -> int:
    """The kills of the out of memory killer in a cgroup so far (0 when it is gone)."""
    for name in ("memory.events", "memory.oom_control"):
        for line in _read(path / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


def pids(path: Path) -> list[int]:
    """The processes in a cgroup."""
    return [int(p) for p in _read(path / "cgroup.procs").split()]


def remove(path: Path, timeout_s: float = 5.0) -> bool:
    """Kill what is left in a cgroup and remove it; whether it is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in pids(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        time.sleep(0.02)


def own_pids_cgroup(proc: Path = PROC) -> tuple[int, Path] | None:
    """This process's cgroup with a pids controller as (version, directory), None without one:
    the v1 ``pids`` hierarchy where it is mounted, else v2 when it offers ``pids``."""
    from harness.cgroups import _within, mounts

    try:
        memberships = (proc / "self" / "cgroup").read_text().splitlines()
        mounted = mounts(proc)
    except OSError:
        return None
    v2_path = None
    for line in memberships:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            v2_path = path
        elif "pids" in controllers.split(","):
            for mount in mounted:
                if mount.fstype == "cgroup" and "pids" in mount.options:
                    return 1, _within(mount, path)
    for mount in mounted:
        if v2_path is not None and mount.fstype == "cgroup2":
            directory = _within(mount, v2_path)
            if "pids" in _read(directory / "cgroup.controllers").split():
                return 2, directory
    return None


def detect_pids(proc: Path = PROC) -> Path | None:
    """The directory in which this process can create pids cgroups with a limit, or None.

    As ``detect``: the subtree ``simrun`` is made and a probe cgroup with a limit is made and
    removed in it; any refusal means the tasks get ``RLIMIT_NPROC`` instead.
    """
    try:
        own = own_pids_cgroup(proc)
        if own is None:
            return None
        version, directory = own
        parent = directory / SUBTREE
        if version == 2:
            _enable(directory, "pids")
        parent.mkdir(exist_ok=True)
        if version == 2:
            _enable(parent, "pids")
        remove(create_pids(parent, f"probe-{os.getpid()}", 64))
    except OSError:
        return None
    return parent


def _enable(directory: Path, controller: str) -> None:
    """Let the children of a v2 cgroup use a controller (its subtree control)."""
    if controller not in _read(directory / "cgroup.subtree_control").split():
        (directory / "cgroup.subtree_control").write_text(f"+{controller}")


def create_pids(parent: Path, name: str, limit: int) -> Path:
    """A cgroup ``name`` in which at most ``limit`` processes (and threads) may live; an
    existing one (the memory cgroup of the same name on v2) is reused."""
    path = parent / name
    path.mkdir(exist_ok=True)
    (path / "pids.max").write_text(str(max(1, limit)))
    return path
