"""The cgroup of this process: its memory and CPU, on cgroup v2 or on the v1 controllers.

A pod has cgroup v2 (``memory.stat`` anon, ``memory.max``, ``memory.events`` oom_kill,
``cpu.max``, ``cpu.stat`` throttled_usec); a machine with the v1 controllers has ``memory.stat``
total_rss, ``memory.limit_in_bytes``, ``memory.oom_control`` oom_kill, ``cpu.cfs_quota_us`` and
``cpu.stat`` throttled_time. Which one a process has is read at run time from
``/proc/self/cgroup`` and ``/proc/self/mountinfo``: a v1 controller wins over v2, as the kernel
attaches a controller to one hierarchy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PROC = Path("/proc")
"""The mount of procfs."""
UNLIMITED = 1 << 62
"""A v1 limit at or above this is no limit (the kernel writes its page counter maximum)."""


@dataclass(frozen=True)
class Mount:
    """A cgroup filesystem from ``mountinfo``."""

    root: str
    point: Path
    fstype: str
    options: frozenset[str]


@dataclass(frozen=True)
class Cgroup:
    """The directory of one cgroup of this process, for one controller."""

    path: Path
    version: Literal[1, 2]
    top: Path
    """The mount point: the v2 limits of the parents are read up to it."""

    def _stat(self, name: str) -> dict[str, int]:
        """The integer fields of a ``key value`` file; empty when it cannot be read."""
        try:
            text = (self.path / name).read_text()
        except OSError:
            return {}
        values: dict[str, int] = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                values[key] = int(value)
        return values

    def anon_bytes(self) -> int | None:
        """The anonymous memory of the cgroup and its children, without the page cache."""
        stat = self._stat("memory.stat")
        if self.version == 2:
            return stat.get("anon")
        return stat.get("total_rss", stat.get("rss"))

    def held_bytes(self) -> int | None:
        """The memory the cgroup holds that the kernel cannot reclaim without swap: its
        anonymous memory and its tmpfs pages (a task's ``/dev/shm``)."""
        stat = self._stat("memory.stat")
        anon = self.anon_bytes()
        shmem = stat.get("shmem", 0) if self.version == 2 else stat.get("total_shmem", 0)
        return None if anon is None else anon + shmem

    def page_cache_bytes(self) -> int | None:
        """The page cache of files charged to the cgroup (tmpfs left in: it is no cache)."""
        stat = self._stat("memory.stat")
        if self.version == 2:
            cache = stat.get("file")
        else:
            cache = stat.get("total_cache", stat.get("cache"))
        shmem = stat.get("shmem", 0) if self.version == 2 else stat.get("total_shmem", 0)
        return None if cache is None else max(0, cache - shmem)

    def high_water_bytes(self) -> int | None:
        """The kernel's high-water mark of the memory charged to the cgroup, page cache
        included: v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak`` (Linux 5.19+)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def reset_high_water(self) -> bool:
        """Start the v1 high-water mark again at the usage now; whether the kernel allowed it
        (v2 and a read-only cgroup filesystem do not)."""
        if self.version != 1:
            return False
        try:
            (self.path / "memory.max_usage_in_bytes").write_text("0")
        except OSError:
            return False
        return True

    def limit_bytes(self) -> int | None:
        """The memory limit of the cgroup and its ancestors, None without one."""
        try:
            if self.version == 1:
                limit = self._stat("memory.stat").get("hierarchical_memory_limit")
                if limit is None:
                    limit = int((self.path / "memory.limit_in_bytes").read_text())
                return None if limit >= UNLIMITED else limit
            limits = []
            for directory in (self.path, *self.path.parents):
                limit_file = directory / "memory.max"
                if limit_file.exists() and (text := limit_file.read_text().strip()) != "max":
                    limits.append(int(text))
                if directory == self.top:
                    break
            return min(limits) if limits else None
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int | None:
        """The cumulative count of processes the OOM killer killed in the cgroup."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return self._stat(name).get("oom_kill")

    def quota_cores(self) -> int | None:
        """The CPU quota in whole cores (rounded up), None without a quota."""
        try:
            if self.version == 2:
                fields = (self.path / "cpu.max").read_text().split()
                if not fields or fields[0] == "max":
                    return None
                quota_us, period_us = int(fields[0]), int(fields[1])
            else:
                quota_us = int((self.path / "cpu.cfs_quota_us").read_text())
                period_us = int((self.path / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError, IndexError):
            return None
        if quota_us <= 0 or period_us <= 0:
            return None
        return max(1, math.ceil(quota_us / period_us))

    def throttled_seconds(self) -> float | None:
        """The cumulative seconds the cgroup waited for its CPU quota."""
        key, per_second = ("throttled_usec", 1e6) if self.version == 2 else ("throttled_time", 1e9)
        value = self._stat("cpu.stat").get(key)
        return None if value is None else value / per_second


def _unescape(text: str) -> str:
    """A path of ``mountinfo``, whose spaces and tabs are octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def mounts(proc: Path = PROC) -> list[Mount]:
    """The cgroup filesystems (v1 and v2) mounted in this process's namespace."""
    found = []
    for line in (proc / "self" / "mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        found.append(
            Mount(
                root=_unescape(fields[3]),
                point=Path(_unescape(fields[4])),
                fstype=tail[0],
                options=frozenset(tail[2].split(",")),
            )
        )
    return found


def _within(mount: Mount, path: str) -> Path:
    """The directory of a cgroup path of ``/proc/self/cgroup`` below its mount."""
    root = mount.root.rstrip("/")
    if ".." in Path(path).parts or not (path == root or path.startswith(root + "/")):
        return mount.point  # outside the namespace's view: its root is the best we know
    return mount.point / path[len(root) :].lstrip("/")


def find(controller: Literal["memory", "cpu"], proc: Path = PROC) -> Cgroup | None:
    """This process's cgroup of a controller: the v1 hierarchy if it has one, else v2.

    None when neither is mounted or readable (no cgroup filesystem, as in some sandboxes).
    """
    try:
        memberships = (proc / "self" / "cgroup").read_text().splitlines()
        mounted = mounts(proc)
    except OSError:
        return None
    interface = {"memory": "memory.stat", "cpu": "cpu.stat"}[controller]
    v2_path = None
    for line in memberships:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            v2_path = path
        elif controller in controllers.split(","):
            for mount in mounted:
                if mount.fstype == "cgroup" and controller in mount.options:
                    directory = _within(mount, path)
                    if (directory / interface).exists():
                        return Cgroup(directory, 1, mount.point)
    if v2_path is not None:
        for mount in mounted:
            if mount.fstype == "cgroup2":
                directory = _within(mount, v2_path)
                if (directory / interface).exists():
                    return Cgroup(directory, 2, mount.point)
    return None
