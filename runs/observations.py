"""Worker reports recorded as resource observations, each once (spec/000, Ruling 24).

A pod of a task writes ``tasks/<task>/workers/<worker>-<attempt>.json`` (simrun-worker, and
simrun-exec by the task id). Once the task is final each report becomes an ``Observation``
of its task type, and ``tasks/<task>/recorded/<worker>-<attempt>`` marks it right after, so
it is never recorded twice. An attempt killed for memory without a report is observed at
its pod's limit.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import report as harness_report
from harness.report import WorkerReport
from runs import retry_rule
from runs.models import Attempt, Observation, Task
from runs.planner import TaskPlan, observation_key

log = logging.getLogger(__name__)

GIB = 2**30


def read_report(path: Path) -> WorkerReport | None:
    """Read a report (of this or a newer harness); None when it is missing or unreadable."""
    try:
        return harness_report.read_report(path)
    except (OSError, ValueError, TypeError):
        log.warning("cannot read the report %s", path)
        return None


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


def reports(task_dir: Path) -> dict[tuple[str, int], Path]:
    """The reports of a task by (worker, attempt), found by listing ``workers/``."""
    folder = task_dir / "workers"
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return {}
    return {
        (worker_of(name), attempt_of(name)): folder / name
        for name in names
        if name.endswith(".json") and not name.startswith(".")
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


def record(*, task: Task, plan: TaskPlan, task_dir: Path, kills: Mapping[str, list[int]]) -> int:
    """Record the reports of a task not yet recorded, and its kills without a report.

    Returns the observations written. Each carries the memory its attempt ran with, as its
    attempt row says (``attempt_memory_gb``), and gives the row its measured peak. A command
    task is observed by its key (``runs.planner.observation_key``); one without a key only
    has its attempts' peaks recorded.
    """
    key = observation_key(task_type=task.type, run_name=task.run.name, task_id=task.task_id)
    marks = task_dir / "recorded"
    try:
        recorded = set(os.listdir(marks))
    except FileNotFoundError:
        recorded = set()
    found = reports(task_dir)
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
    for (worker, attempt), path in sorted(found.items()):
        if f"{worker}-{attempt}" in recorded:
            continue
        report = read_report(path)
        if report is None:
            continue
        gb = memory(worker, attempt, report)
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
        )
        _store(observation, marks, node=report.node, memory_gb=gb, observed=bool(key))
        written += bool(key)
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
            )
            _store(observation, marks, node="", memory_gb=gb)
            written += 1
    return written


def _seconds(row: Attempt | None) -> float:
    """The wall-clock seconds of an attempt from its row, 0 when its start or end is unknown."""
    if row is None or row.started_at is None or row.ended_at is None:
        return 0.0
    return max(0.0, (row.ended_at - row.started_at).total_seconds())


def _store(
    observation: Observation, marks: Path, *, node: str, memory_gb: float, observed: bool = True
) -> None:
    """Write an observation (at most once per attempt; not ``observed``: none) and its
    attempt's peak, then its mark in ``recorded/``."""
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
    )
    Attempt.objects.bulk_create([row], ignore_conflicts=True)
    if observation.peak_bytes is not None:
        Attempt.objects.filter(
            task=observation.task, worker=observation.worker, attempt=observation.attempt
        ).update(peak_bytes=observation.peak_bytes)
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"{observation.worker}-{observation.attempt}").touch()

def record_kills(*, task: Task, plan: TaskPlan, kills: Mapping[str, Sequence[int]]) -> int:
    """Record the kills for memory of a live task's attempts at once, at their limits.

    A kill is evidence for the next plan from the moment its attempt ended, not only once
    its task is final: a sweep submitted while a task of its type is being retried learns
    from it. No mark is written: ``record`` still reads the attempt's report once the task
    is final, and gives the attempt row its peak (the observation stays this one, once per
    attempt). Returns the kills written (or already there).
    """
    key = observation_key(task_type=task.type, run_name=task.run.name, task_id=task.task_id)
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
            )
        )
    Observation.objects.bulk_create(found, ignore_conflicts=True)
    return len(found)
