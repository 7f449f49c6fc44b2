"""Worker reports recorded as resource observations, each once (spec/000, Ruling 24).

A pod of a task writes ``tasks/<task>/workers/<worker>-<attempt>.json`` (simrun-worker, and
simrun-exec by the task id). Once the task is final each report becomes an ``Observation``
of its task type, and ``tasks/<task>/recorded/<worker>-<attempt>`` marks it right after, so
it is never recorded twice. An attempt killed for memory without a report is observed at
its pod's limit.

A report is the task's word, not a measure: it is read by ``harness.untrusted`` (a regular
file, no link on the way, at most ``SIMRUN_REPORT_MAX_MB``) and checked before it is believed
(types, finite numbers in sane ranges); a peak far above the attempt's limit refuses it, CPU
seconds beyond what its processes could spend are cut down. Each report is read once: one
refused is marked in ``recorded/`` too (``<worker>-<attempt>.refused``). The reports of the
attempts the service knows are read first, and a task's reports are read up to
``SIMRUN_REPORTS_READ_MB`` in all; beyond that the rest are left unread for good (one mark,
``OVER_BUDGET``), so a task that plants thousands of giant reports costs the loop that serves
everyone a bounded read, once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import fields
from typing import Any

from django.conf import settings

from harness import untrusted
from harness.report import WorkerReport
from runs.backends import retry_rule
from runs.backends.base import TaskPlan
from runs.common.store import TaskFolder
from runs.models import Attempt, Observation, Task
from runs.planning.planner import observation_key

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


def read_report(folder: TaskFolder, name: str) -> WorkerReport | None:
    """Read a report ``workers/<name>`` (of this or a newer harness); None when it is missing,
    not a regular file, larger than ``SIMRUN_REPORT_MAX_MB`` or not a sane report."""
    return read_report_counted(folder, name)[0]


def read_report_counted(folder: TaskFolder, name: str) -> tuple[WorkerReport | None, int]:
    """``read_report``, and the bytes it read."""
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


def is_oom(report: WorkerReport, attempt: int, kills: Mapping[str, Sequence[int]]) -> bool:
    """Whether a report is of a worker which was killed for memory (Rulings 34, 39).

    Only the OOM killer's evidence counts: the attempt is one the backend saw OOMKilled, or
    the report counts kills of the OOM killer in its cgroup. A peak near the limit is no
    kill (the kernel reclaims the page cache there) and an exit 137 may be a kill after the
    grace period.
    """
    return attempt in kills.get(report.worker, ()) or report.oom_kills > 0


def not_evidence(report: WorkerReport, row: Attempt | None, *, oom: bool) -> str:
    """Why an attempt's report is no evidence of the memory its type needs; "" when it is.

    An attempt is evidence if it was proven killed for memory or succeeded: its row says it
    exited 0, else (its end never seen, a workflow gone) its report says its work completed.
    One that failed for another reason (a unit failed at its import, exit 3, a stop, a store
    or configuration error) measured a peak of work it never did.
    """
    if oom:
        return ""
    if report.failed:
        return "not evidence of memory: it failed, not for memory"
    if row is not None and row.exit_code is not None:
        return "" if row.exit_code == 0 else f"not evidence of memory: it exited {row.exit_code}"
    if report.completed is False:
        return "not evidence of memory: it stopped before its work was done"
    return ""


def reports(folder: TaskFolder) -> dict[tuple[str, int], str]:
    """The reports of a task by (worker, attempt), their names in ``workers/``, found by
    listing it by descriptor: regular files only (a FIFO or a link is none)."""
    return {
        (worker_of(entry.name), attempt_of(entry.name)): entry.name
        for entry in untrusted.list_dir(folder.base, folder / "workers", limit=MAX_REPORTS)
        if entry.is_file and entry.name.endswith(".json") and not entry.name.startswith(".")
    }


def attempt_memory_gb(
    plan: TaskPlan,
    *,
    attempt: int,
    exits: Mapping[int, int | None],
    known_gb: float | None = None,
    report: WorkerReport | None = None,
) -> float:
    """The memory an attempt ran with: what its backend or its report says it had.

    The backend knows it (the local backend started the process with it); else the report
    says the limit the worker saw; else it is what the retry rule gave the attempt from the
    exit codes of the earlier ones (``exits``, by attempt).
    """
    if known_gb:
        return known_gb
    if report is not None and report.memory_limit_bytes:
        return round(report.memory_limit_bytes / GIB, 3)
    return retry_rule.rendered_memory_gb(
        memory_gb=plan.memory_gb, retry_memory_gb=plan.retry_memory_gb, exits=exits, attempt=attempt
    )


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


def record(
    *, task: Task, plan: TaskPlan, folder: TaskFolder, kills: Mapping[str, list[int]]
) -> int:
    """Record the reports of a task not yet recorded, and its kills without a report.

    Returns the observations written. Each carries the memory its attempt ran with, as its
    attempt row says (``attempt_memory_gb``), and gives the row its measured peak. A command
    task is observed by its key (``runs.planning.planner.observation_key``); one without a key only
    has its attempts' peaks recorded.
    """
    marks = Marks(folder)
    try:
        return _record(task=task, plan=plan, folder=folder, kills=kills, marks=marks)
    finally:
        marks.close()


def _record(
    *,
    task: Task,
    plan: TaskPlan,
    folder: TaskFolder,
    kills: Mapping[str, list[int]],
    marks: Marks,
) -> int:
    key = observation_key(
        task_type=task.type, run_name=task.run.name, task_id=task.task_id, command=task.command
    )
    recorded = marks.names
    found = reports(folder)
    rows = {(a.worker, a.attempt): a for a in Attempt.objects.filter(task=task)}
    exits: dict[str, dict[int, int | None]] = {}
    for (worker, number), row in rows.items():
        exits.setdefault(worker, {})[number] = 137 if row.oom_killed else row.exit_code

    def memory(worker: str, attempt: int, report: WorkerReport | None = None) -> float:
        row = rows.get((worker, attempt))
        return attempt_memory_gb(
            plan,
            attempt=attempt,
            exits=exits.get(worker, {}),
            known_gb=row.memory_gb if row is not None else None,
            report=report,
        )

    written = 0
    budget = int(settings.SIMRUN_REPORTS_READ_MB * MIB)
    # The reports of attempts the service knows first: a task's forgeries never starve them.
    for (worker, attempt), name in sorted(found.items(), key=lambda kv: (kv[0] not in rows, kv)):
        mark = f"{worker}-{attempt}"
        if mark in recorded or f"{mark}{REFUSED}" in recorded or OVER_BUDGET in recorded:
            continue
        if budget <= 0:
            log.warning(
                "the reports of %s took more than %g MiB (SIMRUN_REPORTS_READ_MB): the rest "
                "are left unread",
                folder.path,
                settings.SIMRUN_REPORTS_READ_MB,
            )
            marks.mark(OVER_BUDGET)
            break
        report, size = read_report_counted(folder, name)
        budget -= size
        gb = memory(worker, attempt, report)
        if report is not None:
            report = believed(report, limit_bytes=int(gb * GIB), cores=plan.cores)
        if report is None:
            if size:
                marks.mark(f"{mark}{REFUSED}")  # read and refused: never read again
            continue
        observation = Observation(
            task_type=key,
            run_id=task.run_id,
            task=task,
            worker=worker,
            attempt=attempt,
            processes=max(1, report.processes),
            per_worker_gb=report.per_worker_gb or plan.per_worker_gb,
            peak_bytes=report.peak_memory_bytes,
            limit_bytes=int(gb * GIB),
            units=len(report.units_done),
            unit_seconds=report.unit_seconds,
            cpu_seconds=report.cpu_seconds,
            seconds=report.prepare_seconds + report.seconds,
            oom=is_oom(report, attempt, kills),
            oom_kills=report.oom_kills,
            features=plan.features,
        )
        note = not_evidence(report, rows.get((worker, attempt)), oom=observation.oom)
        observed = bool(key) and not note
        _store(observation, marks, node=report.node, memory_gb=gb, observed=observed, note=note)
        written += observed
    if not key:
        return written
    for worker, attempts in sorted(kills.items()):
        if task_of(worker, {task.task_id}) is None:
            continue
        for attempt in attempts:
            if (worker, attempt) in found or f"{worker}-{attempt}" in recorded:
                continue
            gb = memory(worker, attempt)
            observation = Observation(
                task_type=key,
                run_id=task.run_id,
                task=task,
                worker=worker,
                attempt=attempt,
                processes=plan.processes,
                per_worker_gb=plan.per_worker_gb,
                limit_bytes=int(gb * GIB),
                seconds=_seconds(rows.get((worker, attempt))),
                oom=True,
                from_report=False,
                features=plan.features,
            )
            _store(observation, marks, node="", memory_gb=gb)
            written += 1
    return written


REPORT_FIELDS = (
    "processes",
    "per_worker_gb",
    "peak_bytes",
    "limit_bytes",
    "units",
    "unit_seconds",
    "cpu_seconds",
    "seconds",
    "oom",
    "oom_kills",
    "from_report",
)
"""What a report says of its attempt: all of an observation but its key and when it was made."""


def _seconds(row: Attempt | None) -> float:
    """The wall-clock seconds of an attempt from its row, 0 when its start or end is unknown."""
    if row is None or row.started_at is None or row.ended_at is None:
        return 0.0
    return max(0.0, (row.ended_at - row.started_at).total_seconds())


def _store(
    observation: Observation,
    marks: Marks,
    *,
    node: str,
    memory_gb: float,
    observed: bool = True,
    note: str = "",
) -> None:
    """Write an observation (at most once per attempt; not ``observed``: none) and its
    attempt's peak and ``note`` (why it is no evidence), then its mark in ``recorded/``.

    A report's observation replaces the plan-shaped one ``record_kills`` wrote while the task
    was retrying (Ruling 24 keeps the plan's shape only for an attempt without a report); it
    stays where the kill was seen."""
    if observed and observation.from_report:
        Observation.objects.filter(
            task=observation.task,
            worker=observation.worker,
            attempt=observation.attempt,
            from_report=False,
        ).update(**{name: getattr(observation, name) for name in REPORT_FIELDS})
    if observed:
        Observation.objects.bulk_create([observation], ignore_conflicts=True)
    row = Attempt(
        task=observation.task,
        worker=observation.worker,
        attempt=observation.attempt,
        node_name=node,
        memory_gb=memory_gb,
        oom_killed=observation.oom,
        peak_bytes=observation.peak_bytes,
        not_evidence=note,
    )
    Attempt.objects.bulk_create([row], ignore_conflicts=True)
    measured: dict[str, object] = {"not_evidence": note} if note else {}
    if observation.peak_bytes is not None:
        measured["peak_bytes"] = observation.peak_bytes
    if measured:
        Attempt.objects.filter(
            task=observation.task, worker=observation.worker, attempt=observation.attempt
        ).update(**measured)
    marks.mark(f"{observation.worker}-{observation.attempt}")


def record_kills(*, task: Task, plan: TaskPlan, kills: Mapping[str, Sequence[int]]) -> int:
    """Record the kills for memory of a live task's attempts at once, at their limits.

    A kill is evidence for the next plan from the moment its attempt ended, not only once
    its task is final: a sweep submitted while a task of its type is being retried learns
    from it. No mark is written: ``record`` still reads the attempt's report once the task
    is final, and the observation becomes the report's (its peak, processes and OOM kills)
    if the attempt has one. Returns the kills written (or already there).
    """
    key = observation_key(
        task_type=task.type, run_name=task.run.name, task_id=task.task_id, command=task.command
    )
    killed = [
        (worker, attempt)
        for worker, attempts in sorted(kills.items())
        if task_of(worker, {task.task_id}) is not None
        for attempt in attempts
    ]
    if not key or not killed:
        return 0
    rows = {(a.worker, a.attempt): a for a in Attempt.objects.filter(task=task)}
    exits: dict[str, dict[int, int | None]] = {}
    for (worker, number), seen in rows.items():
        exits.setdefault(worker, {})[number] = 137 if seen.oom_killed else seen.exit_code
    found = []
    for worker, attempt in killed:
        row = rows.get((worker, attempt))
        gb = attempt_memory_gb(
            plan,
            attempt=attempt,
            exits=exits.get(worker, {}),
            known_gb=row.memory_gb if row is not None else None,
        )
        found.append(
            Observation(
                task_type=key,
                run_id=task.run_id,
                task=task,
                worker=worker,
                attempt=attempt,
                processes=plan.processes,
                per_worker_gb=plan.per_worker_gb,
                limit_bytes=int(gb * GIB),
                seconds=_seconds(row),
                oom=True,
                from_report=False,
                features=plan.features,
            )
        )
    Observation.objects.bulk_create(found, ignore_conflicts=True)
    return len(found)
