"""The reports the workers of a task write, read as the task's word, not a measure.

A pod of a task writes ``tasks/<task>/workers/<worker>-<attempt>.json`` (simrun-worker, and
simrun-exec by the task id). A report is read by ``harness.untrusted`` (a regular file, no link
on the way, at most ``SIMRUN_REPORT_MAX_MB``) and checked before it is believed (types, finite
numbers in sane ranges); a peak far above the attempt's limit refuses it, CPU seconds beyond
what its processes could spend are cut down. Each report is read once: one refused is marked
in the service's ``recorded/`` (``<worker>-<attempt>.refused``, ``Marks``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import fields
from typing import Any

from django.conf import settings

from harness import untrusted
from harness.report import WorkerReport
from runs.common.store import TaskFolder

log = logging.getLogger(__name__)

GIB = 2**30
MIB = 2**20
REFUSED = ".refused"
"""The suffix of the mark of a report read and refused: it is never read again."""
OVER_BUDGET = ".reports-over-budget"
"""The mark of a task whose reports took all of ``SIMRUN_REPORTS_READ_MB``: none is read more."""
MAX_REPORTS = 10_000
"""Entries of ``workers/`` looked at."""
MAX_BYTES = 64 * 2**40
"""No memory figure of a report above this (64 TiB) is believed."""
MAX_PROCESSES = 4096
MAX_SECONDS = 366 * 86400.0
"""A report's wall seconds: a year at most."""
PEAK_OVER_LIMIT = 4
"""A peak above its attempt's limit by more than this factor was never measured: refused."""
CPU_SLACK = 2.0
CPU_GRACE_S = 60.0
"""CPU seconds above cores × wall seconds × ``CPU_SLACK`` + ``CPU_GRACE_S`` are cut there."""


def read_report_counted(folder: TaskFolder, name: str) -> tuple[WorkerReport | None, int]:
    """Read a report ``workers/<name>`` (of this or a newer harness), and the bytes it read; no
    report when it is missing, not a regular file, larger than ``SIMRUN_REPORT_MAX_MB`` or not a
    sane report."""
    cap = int(settings.SIMRUN_REPORT_MAX_MB * MIB)
    try:
        data = untrusted.read_bytes(folder.base, folder / f"workers/{name}", cap + 1)
    except OSError as error:
        log.warning("cannot read the report %s/workers/%s: %s", folder.path, name, error)
        return None, 0
    if len(data) > cap:
        log.warning(
            "report %s/workers/%s refused: larger than %d bytes (SIMRUN_REPORT_MAX_MB)",
            folder.path,
            name,
            cap,
        )
        return None, len(data)
    try:
        fields_ = json.loads(data)
        if not isinstance(fields_, dict):
            raise ValueError("not a JSON object")
        known = {f.name for f in fields(WorkerReport)}
        report = WorkerReport(**{k: v for k, v in fields_.items() if k in known})
    except (ValueError, TypeError, RecursionError) as error:
        log.warning("report %s/workers/%s refused: %s", folder.path, name, error)
        return None, len(data)
    problem = report_problem(report)
    if problem:
        log.warning("report %s/workers/%s refused: %s", folder.path, name, problem)
        return None, len(data)
    return report, len(data)


def read_unrefused(folder: TaskFolder, name: str, mark: str) -> WorkerReport | None:
    """A report not refused before, for a poll that needs it before its task is final; one it
    reads and refuses is marked so (``recorded/<mark>.refused``), and no pass reads it again."""
    refused = f"{mark}{REFUSED}"
    if Marks.has(folder, refused):
        return None
    report, size = read_report_counted(folder, name)
    if report is None and size:
        marks = Marks(folder)
        try:
            marks.mark(refused)
        finally:
            marks.close()
    return report


def _number(value: Any, low: float, high: float, *, whole: bool = False) -> bool:
    """Whether ``value`` is a finite JSON number from ``low`` to ``high`` (an integer if
    ``whole``); booleans are none."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and (
        not math.isfinite(value) or (whole and not value.is_integer())
    ):
        return False
    return low <= value <= high


def report_problem(report: WorkerReport) -> str | None:
    """What makes a report unbelievable on its own (a wrong type, NaN, a negative or absurd
    figure); None for a sane one."""
    if not isinstance(report.worker, str) or not isinstance(report.node, str):
        return "worker or node is not a string"
    if not isinstance(report.peak_source, str) or not isinstance(report.failed, bool):
        return "peak_source or failed of a wrong type"
    if report.completed is not None and not isinstance(report.completed, bool):
        return f"completed {report.completed!r}"
    if not _number(report.processes, 0, MAX_PROCESSES, whole=True):
        return f"processes {report.processes!r}"
    if not isinstance(report.units_done, list) or not all(
        _number(unit, 0, 2**63 - 1, whole=True) for unit in report.units_done
    ):
        return "units_done is not a list of units"
    if not _number(report.oom_kills, 0, 2**31, whole=True):
        return f"oom_kills {report.oom_kills!r}"
    for name in ("peak_memory_bytes", "memory_limit_bytes"):
        value = getattr(report, name)
        if value is not None and not _number(value, 0, MAX_BYTES, whole=True):
            return f"{name} {value!r}"
    if not _number(report.per_worker_gb, 0, MAX_BYTES / GIB):
        return f"per_worker_gb {report.per_worker_gb!r}"
    for name in ("seconds", "prepare_seconds"):
        if not _number(getattr(report, name), 0, MAX_SECONDS):
            return f"{name} {getattr(report, name)!r}"
    for name in ("cpu_seconds", "unit_seconds", "throttled_seconds"):
        value = getattr(report, name)
        if (value is not None or name != "throttled_seconds") and not _number(
            value, 0, MAX_SECONDS * MAX_PROCESSES
        ):
            return f"{name} {value!r}"
    if report.started is not None and not _number(report.started, 0, 2**40):
        return f"started {report.started!r}"
    return None


def believed(report: WorkerReport, *, limit_bytes: int, cores: int) -> WorkerReport | None:
    """A sane report measured against its attempt: None when its peak is far above the limit
    the attempt ran with; CPU and unit seconds beyond what its processes could spend cut."""
    peak = report.peak_memory_bytes
    if peak is not None and limit_bytes > 0 and peak > limit_bytes * PEAK_OVER_LIMIT:
        log.warning(
            "report of %s refused: peak %d bytes, limit %d", report.worker, peak, limit_bytes
        )
        return None
    wall = report.seconds + report.prepare_seconds
    most = max(1, report.processes, cores) * wall * CPU_SLACK + CPU_GRACE_S
    if report.cpu_seconds > most or report.unit_seconds > most:
        log.warning(
            "report of %s: cpu %.0f s, unit %.0f s over %.0f s of %d processes; cut to %.0f s",
            report.worker,
            report.cpu_seconds,
            report.unit_seconds,
            wall,
            report.processes,
            most,
        )
        report.cpu_seconds = min(report.cpu_seconds, most)
        report.unit_seconds = min(report.unit_seconds, most)
    return report


def attempt_of(name: str) -> int:
    """The attempt of a report file ``<worker>-<attempt>.json``, 0 without one."""
    stem = name.removesuffix(".json")
    _, _, last = stem.rpartition("-")
    return int(last) if last.isdigit() else 0


def worker_of(name: str) -> str:
    """The worker of a report file ``<worker>-<attempt>.json`` (all of the stem without one)."""
    stem = name.removesuffix(".json")
    worker, _, last = stem.rpartition("-")
    return worker if worker and last.isdigit() else stem


def report_names(folder: TaskFolder) -> dict[tuple[str, int], str]:
    """The reports of a task by (worker, attempt), their names in ``workers/``, found by
    listing it by descriptor: regular files only (a FIFO or a link is none)."""
    return {
        (worker_of(entry.name), attempt_of(entry.name)): entry.name
        for entry in untrusted.list_dir(folder.base, folder / "workers", limit=MAX_REPORTS)
        if entry.is_file and entry.name.endswith(".json") and not entry.name.startswith(".")
    }


def task_of(worker: str, task_ids: Mapping[str, Any] | set[str]) -> str | None:
    """The task of a worker id ``<task>-w<i>``, a merge ``<task>-merge`` or a task id."""
    if worker in task_ids:
        return worker
    base, _, suffix = worker.rpartition("-")
    pod = suffix == "merge" or (suffix[:1] == "w" and suffix[1:].isdigit())
    return base if pod and base in task_ids else None


class Marks:
    """The marks of recorded attempts, ``recorded/<worker>-<attempt>``: a folder of the
    service's own, so a task can neither plant marks (hiding its reports) nor a link to be
    written through; one it planted is listed as empty and moved aside at the first mark."""

    def __init__(self, folder: TaskFolder) -> None:
        self.folder = folder
        self.names = self._listed()
        self._fd: int | None = None

    def _listed(self) -> set[str]:
        try:
            with untrusted.directory(self.folder.base, self.folder / "recorded") as fd:
                status = os.fstat(fd)
                if status.st_uid != os.geteuid() or stat.S_IMODE(status.st_mode) & 0o022:
                    return set()
                return {e.name for e in untrusted.entries(fd)}
        except OSError:
            return set()

    @staticmethod
    def has(folder: TaskFolder, name: str) -> bool:
        """Whether one mark is there, in the service's own ``recorded/``."""
        try:
            with untrusted.directory(folder.base, folder / "recorded") as fd:
                status = os.fstat(fd)
                if status.st_uid != os.geteuid() or stat.S_IMODE(status.st_mode) & 0o022:
                    return False
                os.stat(name, dir_fd=fd, follow_symlinks=False)
                return True
        except OSError:
            return False

    def mark(self, name: str) -> None:
        if self._fd is None:
            self._fd = untrusted.service_dir(self.folder.base, self.folder / "recorded")
        untrusted.create_once_at(self._fd, name, b"")
        self.names.add(name)

    def close(self) -> None:
        if self._fd is not None:
            with suppress(OSError):
                os.close(self._fd)
            self._fd = None
