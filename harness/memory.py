"""Memory and CPU evidence: peak memory, OOM kills, CPU seconds, and the pool size.

Memory is that of the cgroup in a pod (``SIMRUN_MEMORY_SOURCE=cgroup``) or of the harness's
process tree (``process``, the local backend, whose processes share a cgroup). It is what the
kernel cannot reclaim at the limit, anonymous memory above all; the page cache of staging,
installing and writing outputs is left out, as the kernel reclaims it at the limit instead of
killing. The peak is the kernel's high-water mark where it keeps one, samples elsewhere.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping
from functools import cache
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
PeakSource = Literal["cgroup-v1-max-usage", "cgroup-v2-peak", "vmhwm", "rusage-maxrss", "sampled"]
"""Where a report's peak came from (``MemorySampler.high_water``; ``rusage-maxrss``: the
largest resident memory of one process of a plain command, which the local launcher reports
when there is no cgroup)."""
CACHE_TOLERANCE = 8 << 20
"""Bytes the page cache may change while the work runs for a cgroup's high-water mark to count."""
CACHE_SHARE = 0.02
"""… or this share of the mark, when more."""


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


def _children(pid: int, proc: Path) -> list[int]:
    """The children of a process from ``/proc/<pid>/task/<tid>/children`` of each of its
    threads: a few reads, where the scan of ``_parents`` reads every process of the machine."""
    found: list[int] = []
    try:
        threads = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return found  # ended meanwhile
    for thread in threads:
        try:
            with open(f"{proc}/{pid}/task/{thread}/children", "rb") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            continue  # the thread ended meanwhile
    return found


@cache
def _children_listed(proc: Path) -> bool:
    """Whether the kernel lists each thread's children (``CONFIG_PROC_CHILDREN``)."""
    return os.path.exists(f"{proc}/self/task/{threading.get_native_id()}/children")


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """The processes below ``pid``, children first."""
    listed = _children_listed(proc)
    parents = {} if listed else _parents(proc)

    def children(process: int) -> list[int]:
        return _children(process, proc) if listed else parents.get(process, [])

    found, pending = [], children(pid)
    while pending:
        current = pending.pop(0)
        found.append(current)
        pending.extend(children(current))
    return found


def _status_kib(status: str) -> dict[str, int]:
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("RssAnon", "VmRSS", "VmHWM", "RssFile", "RssShmem"):
            values[key] = int(rest.split()[0])
    return values


def _anon_kib(values: dict[str, int]) -> int | None:
    return values.get("RssAnon", values.get("VmRSS"))


def _high_water_kib(values: dict[str, int]) -> int | None:
    """The process's peak resident memory less the files it maps now: its anonymous peak."""
    if "VmHWM" not in values:
        return None
    return max(0, values["VmHWM"] - values.get("RssFile", 0) - values.get("RssShmem", 0))


def _tree(pid: int, proc: Path) -> list[dict[str, int]] | None:
    """The memory fields of a process and its descendants; None when the process is gone."""
    found = []
    for current in (pid, *descendants(pid, proc)):
        try:
            values = _status_kib((proc / str(current) / "status").read_text())
        except OSError:
            values = {}
        if not values and current == pid:
            return None
        found.append(values)
    return found


Figure = Callable[[dict[str, int]], int | None]


def _sum_kib(tree: list[dict[str, int]], figure: Figure) -> int | None:
    """A figure summed over a tree in bytes; None when the root has none."""
    figures = [figure(values) for values in tree]
    return None if figures[0] is None else sum(f or 0 for f in figures) * 1024


def process_tree_anon(pid: int, proc: Path = PROC) -> int | None:
    """The anonymous memory of a process and all of its descendants in bytes.

    The sum of RssAnon (VmRSS without it) over the processes: pages shared after a fork count
    once per process, so it is an upper bound. None when the process is gone.
    """
    tree = _tree(pid, proc)
    return None if tree is None else _sum_kib(tree, _anon_kib)


def _reset_own_high_water(proc: Path = PROC) -> None:
    """Start this process's ``VmHWM`` again at its resident memory now (``clear_refs`` 5)."""
    try:
        (proc / "self" / "clear_refs").write_text("5")
    except OSError:
        return


class MemorySampler:
    """The maximum of the anonymous memory of the worker over its samples, and its peak.

    Samples read the cgroup (``memory.stat`` anon on v2, total_rss on v1), or the process
    tree of the harness (``process``, see ``process_tree_anon``). ``high_water`` gives the
    peak of the report: the kernel's high-water mark where it keeps one (see there).
    """

    def __init__(self, source: MemorySource = "cgroup") -> None:
        """Create a sampler without samples; the kernel's high-water marks start again."""
        self.source: MemorySource = source
        self.peak: int | None = None
        self._cgroup = cgroups.find("memory") if source == "cgroup" else None
        self._pid = os.getpid()
        self._cache: tuple[int, int] | None = None
        """The least and the most page cache of the cgroup seen."""
        self._tree_peak: int | None = None
        if self._cgroup is not None:
            self._cgroup.reset_high_water()
        elif source == "process":
            _reset_own_high_water()

    def sample(self) -> int | None:
        """Read the anonymous memory and keep it when it is the largest; returns the sample."""
        if self.source == "process":
            tree = _tree(self._pid, PROC)  # one read of the tree for both figures
            value = None if tree is None else _sum_kib(tree, _anon_kib)
            high = None if tree is None else _sum_kib(tree, _high_water_kib)
            if high is not None and (self._tree_peak is None or high > self._tree_peak):
                self._tree_peak = high
        else:
            value = self._cgroup.anon_bytes() if self._cgroup is not None else None
            cache = self._cgroup.page_cache_bytes() if self._cgroup is not None else None
            if cache is not None:
                low, high = self._cache or (cache, cache)
                self._cache = (min(low, cache), max(high, cache))
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value
        return value

    def high_water(self) -> tuple[int | None, PeakSource]:
        """The peak of the work and where it came from.

        Of a cgroup: its high-water mark (v1 ``max_usage_in_bytes``, v2 ``memory.peak``), which
        counts the page cache the kernel reclaims at the limit, less the least page cache seen,
        so it is the peak of what the kernel cannot reclaim (anonymous memory, tmpfs, kernel
        memory), the memory an OOM kill is about. When the page cache changed by more than
        ``CACHE_TOLERANCE`` (or ``CACHE_SHARE`` of the mark) while the work ran, the mark may
        be page cache at its top, and the largest sample is the peak. Of a process tree: the
        processes' anonymous peaks (``VmHWM`` less the files mapped) summed. Never below a sample.
        """
        sampled = self.peak
        if self.source == "process":
            if self._tree_peak is None:
                return sampled, "sampled"
            return max(self._tree_peak, sampled or 0), "vmhwm"
        mark = self._cgroup.high_water_bytes() if self._cgroup is not None else None
        if mark is None or self._cache is None or self._cgroup is None:
            return sampled, "sampled"
        low, high = self._cache
        if high - low > max(CACHE_TOLERANCE, CACHE_SHARE * mark):
            return sampled, "sampled"
        name: PeakSource = "cgroup-v1-max-usage" if self._cgroup.version == 1 else "cgroup-v2-peak"
        return max(mark - low, sampled or 0), name


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
