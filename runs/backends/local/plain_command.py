"""What a plain command cannot write itself, written by its launcher: its live memory while it
runs (``LiveSampler``, as the harness's heartbeat writes a worker's) and its report at its end
(``report``), so the planner learns its peak, not only its kills.

Only the standard library, the harness and siblings: the launcher imports it from its directory.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Literal

from launch_file import Launch

from harness import untrusted
from harness.cgroups import Cgroup
from harness.memory import PeakSource, process_tree_anon
from harness.report import LIVE_SAMPLES, LiveMemory, WorkerReport

LIVE_SAMPLE_S = 0.25
"""Seconds between two samples of a plain command's memory."""
LIVE_WRITE_S = 1.0
"""Seconds between two writes of its live file (as the harness's heartbeat)."""


class LiveSampler:
    """The live memory of a plain command, which has no harness to write it: a thread that
    samples its cgroup's anonymous memory and tmpfs pages (its ``/dev/shm``, which its peak
    counts too; else its process tree's anonymous memory) and rewrites
    ``LiveMemory`` in the service's ``logs/`` folder (by descriptor, never through a link)
    every ``LIVE_WRITE_S``, as the harness's heartbeat does for its workers."""

    def __init__(self, logs_fd: int, name: str, pid: int, cgroup: Path | None) -> None:
        self.logs_fd, self.name, self.pid = logs_fd, name, pid
        self.cgroup = None
        if cgroup:
            version: Literal[1, 2] = 1 if (cgroup / "memory.max_usage_in_bytes").exists() else 2
            self.cgroup = Cgroup(cgroup, version, cgroup.parent)
        self.samples: deque[tuple[float, int]] = deque(maxlen=LIVE_SAMPLES)
        self.window: int | None = None
        self.peak: int | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simrun-live", daemon=True)

    def sample(self) -> None:
        cgroup = self.cgroup
        value = cgroup.held_bytes() if cgroup is not None else process_tree_anon(self.pid)
        if value is None:
            return
        self.window = value if self.window is None else max(self.window, value)
        self.peak = value if self.peak is None else max(self.peak, value)

    def write(self) -> None:
        now = round(time.time(), 3)
        if self.window is not None:
            self.samples.append((now, self.window))
            self.window = None
        live = LiveMemory(samples=list(self.samples), peak_bytes=self.peak, updated=now)
        with contextlib.suppress(OSError):  # a full disk: the next write tries again
            untrusted.write_atomic_at(self.logs_fd, self.name, live.to_json())

    def _run(self) -> None:
        next_write = time.monotonic()
        while True:
            self.sample()
            if time.monotonic() >= next_write:
                self.write()
                next_write = time.monotonic() + LIVE_WRITE_S
            if self._done.wait(LIVE_SAMPLE_S):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread and write the file once more, its last samples in."""
        self._done.set()
        self._thread.join()
        self.write()


def command_peak(cgroup: Path | None) -> tuple[int | None, PeakSource]:
    """The peak of a plain command that ended: its cgroup's high-water mark less the page
    cache left at its end, else the largest resident memory of one of its processes."""
    if cgroup is not None:
        version: Literal[1, 2] = 1 if (cgroup / "memory.max_usage_in_bytes").exists() else 2
        found = Cgroup(cgroup, version, cgroup.parent)
        mark = found.high_water_bytes()
        if mark is not None:
            cache = found.page_cache_bytes() or 0
            return max(0, mark - cache), "cgroup-v1-max-usage" if version == 1 else "cgroup-v2-peak"
    kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (kib * 1024 if kib else None), "rusage-maxrss"


def report(launch: Launch, result: dict[str, Any]) -> None:
    """Write the report a plain command cannot write itself, so the planner learns its peak,
    not only its kills; a report already there (the command wrote one) is kept."""
    assert launch.report is not None
    parts = untrusted.parts_of(launch.report)  # below the store: runs/R/tasks/T/workers/W
    try:
        task = untrusted.open_dir(launch.store, parts[:-2])
    except OSError:
        return  # the task's folder is gone or was replaced by a link: nothing is written
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(parts[-2], 0o770, dir_fd=task)
        with untrusted.directory(task, parts[-2:-1]) as workers:
            _write_report(launch, result, workers, parts[-1])
    except OSError:
        return  # a link or a file as workers/: the report is left out, never written through
    finally:
        os.close(task)


def _write_report(launch: Launch, result: dict[str, Any], workers: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.stat(name, dir_fd=workers, follow_symlinks=False)
        return  # the command wrote one
    peak, source = command_peak(launch.cgroup)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    memory = int(launch.memory_gb * 2**30)
    report = WorkerReport(
        worker=name.removesuffix(".json").rsplit("-", 1)[0],
        node=socket.gethostname(),
        processes=1,
        seconds=time.time() - result["started"],
        peak_memory_bytes=peak,
        memory_limit_bytes=memory,
        per_worker_gb=launch.memory_gb,
        failed=result["exit_code"] != 0 and result["signal"] is None,
        completed=result["exit_code"] == 0 and result["signal"] is None,
        started=result["started"],
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        peak_source=source,
    )
    untrusted.write_atomic_at(workers, name, report.to_json(), mode=0o660)
