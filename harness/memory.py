"""Memory and CPU evidence: anonymous memory, OOM kills, CPU seconds, and the pool size.

Memory is the anonymous memory of the cgroup in a pod (``SIMRUN_MEMORY_SOURCE=cgroup``) or of
the harness's process tree (``process``, the local backend, whose processes share a cgroup).
Anonymous memory is what the processes allocated; the page cache of staging, installing and
writing outputs is left out, as the kernel reclaims it at the limit instead of killing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, cast

from harness import cgroups
from harness.cgroups import PROC
from harness.errors import ConfigurationError

MEMORY_SOURCE_ENV = "SIMRUN_MEMORY_SOURCE"
"""Where the harness reads its memory: ``cgroup`` (the default, a pod) or ``process`` (its
process tree in /proc, the local backend, whose processes share the cgroup of the machine)."""
GIB = 1 << 30

MemorySource = Literal["cgroup", "process"]


def memory_source(env: Mapping[str, str]) -> MemorySource:
    """Where the harness reads its memory, ``SIMRUN_MEMORY_SOURCE``, cgroup by default."""
    value = env.get(MEMORY_SOURCE_ENV, "").strip() or "cgroup"
    if value not in ("cgroup", "process"):
        raise ConfigurationError(f"{MEMORY_SOURCE_ENV}={value!r}: expected cgroup or process")
    return cast(MemorySource, value)


def _parents(proc: Path) -> dict[int, list[int]]:
    """The children of every process, from the ppid field of ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """The processes below ``pid``, children first."""
    children = _parents(proc)
    found, pending = [], list(children.get(pid, ()))
    while pending:
        current = pending.pop(0)
        found.append(current)
        pending.extend(children.get(current, ()))
    return found


def _anon_kib(status: str) -> int | None:
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("RssAnon", "VmRSS"):
            values[key] = int(rest.split()[0])
    return values.get("RssAnon", values.get("VmRSS"))


def process_tree_anon(pid: int, proc: Path = PROC) -> int | None:
    """The anonymous memory of a process and all of its descendants in bytes.

    The sum of RssAnon (VmRSS without it) over the processes: pages shared after a fork count
    once per process, so it is an upper bound. None when the process is gone.
    """
    total = 0
    for current in (pid, *descendants(pid, proc)):
        try:
            kib = _anon_kib((proc / str(current) / "status").read_text())
        except OSError:
            kib = None
        if kib is None and current == pid:
            return None
        total += (kib or 0) * 1024
    return total


class MemorySampler:
    """The maximum of the anonymous memory of the worker over its samples.

    Of the cgroup (``memory.stat`` anon on v2, total_rss on v1), or of the process tree of
    the harness (``process``, see ``process_tree_anon``).
    """

    def __init__(self, source: MemorySource = "cgroup") -> None:
        """Create a sampler without samples."""
        self.source: MemorySource = source
        self.peak: int | None = None
        self._cgroup = cgroups.find("memory") if source == "cgroup" else None
        self._pid = os.getpid()

    def sample(self) -> int | None:
        """Read the anonymous memory and keep it when it is the largest; returns the sample."""
        if self.source == "process":
            value = process_tree_anon(self._pid)
        else:
            value = self._cgroup.anon_bytes() if self._cgroup is not None else None
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value
        return value


def processes(cores: int, memory_bytes: int | None, base_gb: float, per_worker_gb: float) -> int:
    """The number of processes the cores and the memory allow.

    ``min(cores, floor((memory - base) / per_worker))``, at least 1; without a limit, the
    cores. Raises ``ValueError`` when not even one process fits into the memory.
    """
    if per_worker_gb <= 0:
        raise ValueError(f"per_worker_gb must be positive, not {per_worker_gb}")
    cores = max(1, cores)
    if memory_bytes is None:
        return cores
    memory_gb = memory_bytes / GIB
    fit = math.floor((memory_gb - base_gb) / per_worker_gb + 1e-6)  # a limit rounded to bytes
    if fit < 1:
        raise ValueError(
            f"{memory_gb:.3f} GiB of memory fit no process of {per_worker_gb} GiB "
            f"besides the base of {base_gb} GiB"
        )
    return min(cores, fit)


class Evidence:
    """The counters of the cgroup when the work began, to report what changed while it ran.

    The OOM killer's counter of a cgroup also counts kills from before (an earlier pod of
    the same cgroup, another worker): only its change is evidence of this worker.
    """

    def __init__(self, source: MemorySource) -> None:
        self._memory = cgroups.find("memory")
        self._cpu = cgroups.find("cpu") if source == "cgroup" else None
        self._kills = self._memory.oom_kills() if self._memory is not None else None
        self._throttled = self._cpu.throttled_seconds() if self._cpu is not None else None

    def oom_kills(self) -> int:
        """The processes the OOM killer killed in the cgroup since the start."""
        if self._memory is None or self._kills is None:
            return 0
        return max(0, (self._memory.oom_kills() or 0) - self._kills)

    def throttled_seconds(self) -> float | None:
        """The seconds the cgroup waited for its CPU quota since the start."""
        if self._cpu is None or self._throttled is None:
            return None
        now = self._cpu.throttled_seconds()
        return None if now is None else max(0.0, now - self._throttled)
