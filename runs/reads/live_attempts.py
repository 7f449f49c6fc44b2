"""An attempt as the run page, the API and ``simrun show`` show it, live while it runs.

Its row is written by the controller from the moment its pod runs (node, start, the memory it
was given); its measured peak once its task's reports are recorded. Meanwhile the harness's
live file (``harness.report.live_path``) has the worker's recent memory samples: a running
attempt's sparkline and its peak so far. A file a task wrote is read with care: no link
followed (on the way to it either), regular files only, at most ``LIVE_READ_BYTES``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from harness import untrusted
from harness.report import LiveMemory, command_live_name
from runs.common import store
from runs.common.store import TaskFolder
from runs.models import FINAL_TASK_STATES, Attempt

LIVE_READ_BYTES = 64 * 1024
"""A live file is a few KiB: more is not one the harness wrote."""
SPARK_WIDTH = 120
SPARK_HEIGHT = 24
GIB = 2**30


@dataclass(frozen=True)
class AttemptFigures:
    """What is shown of an attempt beyond its row: whether it runs, for how long, its peak."""

    running: bool
    phase: str
    """Its row's phase; ``Stopped`` for one recorded running whose task or run ended since."""
    duration_s: float | None
    """From its start to its end, or to now while it runs; None without a start."""
    peak_bytes: int | None
    """The peak its report measured, else the largest of its live samples so far."""
    samples: list[tuple[float, int]] = field(default_factory=list)
    """Its recent memory (Unix time, bytes) while it runs."""

    @property
    def peak_gb(self) -> float | None:
        return None if self.peak_bytes is None else self.peak_bytes / GIB

    def sparkline(self, limit_gb: float | None) -> str:
        """The samples as SVG polyline points in a ``SPARK_WIDTH`` × ``SPARK_HEIGHT`` box, on
        a scale whose top is the limit (or the largest sample above it); "" without two."""
        if len(self.samples) < 2:
            return ""
        first, last = self.samples[0][0], self.samples[-1][0]
        span = max(last - first, 1e-9)
        top = max(max(b for _, b in self.samples), (limit_gb or 0) * GIB, 1)
        return " ".join(
            f"{(t - first) / span * SPARK_WIDTH:.1f},{SPARK_HEIGHT - b / top * SPARK_HEIGHT:.1f}"
            for t, b in self.samples
        )


def read_live(folder: TaskFolder, worker: str, attempt: int) -> LiveMemory | None:
    """The live file of an attempt (``harness.report.live_path``), else the one the local
    backend's launcher writes of a plain command in the task's ``logs/`` (the service's
    folder); None when it is missing, too large, not a regular file, reached through a link,
    not the service's (in ``logs/``) or not readable."""
    data: bytes | None
    try:
        data = untrusted.read_bytes(
            folder.base, folder / f"live/{worker}-{attempt}.json", LIVE_READ_BYTES + 1
        )
    except OSError:
        data = _launcher_live(folder, f"{worker}-{attempt}")
    if data is None:
        return None
    if len(data) > LIVE_READ_BYTES:
        return None
    try:
        return LiveMemory.from_json(data.decode())
    except (ValueError, TypeError):
        return None


def _launcher_live(folder: TaskFolder, stem: str) -> bytes | None:
    """The live file of a plain command's attempt (``harness.report.command_live_name``), read only
    from the service's own ``logs/``; None without one."""
    try:
        logs = untrusted.own_dir(folder.base, folder / "logs")
    except OSError:
        return None
    try:
        return untrusted.read_own(logs, command_live_name(stem), LIVE_READ_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(logs)


def live_figures(attempt: Attempt, now: datetime | None = None) -> AttemptFigures:
    """The figures of an attempt, computed once per instance (its task and run are cached on
    it by the queries that fetched it: no query here)."""
    cached: AttemptFigures | None = getattr(attempt, "_live_figures", None)
    if cached is not None:
        return cached
    task, now = attempt.task, now or timezone.now()
    run = task.run
    recorded_running = attempt.phase == "Running" and attempt.ended_at is None
    running = recorded_running and task.state not in FINAL_TASK_STATES and not run.ended
    live = None
    if running or attempt.peak_bytes is None:
        folder = store.task_folder(run.id, task.task_id)
        live = read_live(folder, attempt.worker, attempt.attempt)
    end = attempt.ended_at
    if end is None and recorded_running and not running:
        end = task.ended_at or run.ended_at
    duration = None
    if attempt.started_at is not None and (running or end is not None):
        duration = max(0.0, ((end or now) - attempt.started_at).total_seconds())
    figures = AttemptFigures(
        running=running,
        phase="Stopped" if recorded_running and not running else attempt.phase,
        duration_s=duration,
        peak_bytes=attempt.peak_bytes
        if attempt.peak_bytes is not None
        else (live.peak_bytes if live else None),
        samples=live.samples if live and running else [],
    )
    attempt._live_figures = figures  # type: ignore[attr-defined]
    return figures
