"""Worker reports recorded as resource observations, each once (Ruling 24, docs/design.md).

Once a task is final each of its reports (``runs.control.reports``) becomes an
``Observation`` of its task type, and ``tasks/<task>/recorded/<worker>-<attempt>`` marks it
right after, so it is never recorded twice. An attempt killed for memory without a sound
report (none, or one refused) is observed at its pod's limit. The reports of the attempts the
service knows are read first, and a task's reports are read up to ``SIMRUN_REPORTS_READ_MB``
in all; beyond that the rest are left unread for good (one mark, ``OVER_BUDGET``), so a task
that plants thousands of giant reports costs the loop that serves everyone a bounded read, once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from django.conf import settings

from harness.report import WorkerReport
from runs.backends import retry_rule
from runs.backends.base import TaskPlan
from runs.common.store import TaskFolder
from runs.control.reports import (
    GIB,
    MIB,
    OVER_BUDGET,
    REFUSED,
    Marks,
    believed,
    read_report_counted,
    report_names,
    task_of,
)
from runs.models import Attempt, Observation, Task
from runs.planning.planner import observation_key

log = logging.getLogger(__name__)


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


def record(
    *, task: Task, plan: TaskPlan, folder: TaskFolder, kills: Mapping[str, list[int]]
) -> int:
    """Record the reports of a task not yet recorded, and its kills without a sound report.

    Every proven kill is observed exactly once (Ruling 24): from its report when the report
    is believed, else at the limit its attempt ran with, whether its report is missing,
    refused (now or at an earlier read) or left unread over the budget. A kill's mark in
    ``recorded/`` is written only once it is observed, so no later pass observes it again.

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
    found = report_names(folder)
    rows = _Rows(task, plan)
    written = 0
    budget = int(settings.SIMRUN_REPORTS_READ_MB * MIB)
    # The reports of attempts the service knows first: a task's forgeries never starve them.
    ordered = sorted(found.items(), key=lambda kv: (kv[0] not in rows.rows, kv))
    for (worker, attempt), name in ordered:
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
        gb = rows.memory_gb(worker, attempt, report)
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
        note = not_evidence(report, rows.rows.get((worker, attempt)), oom=observation.oom)
        observed = bool(key) and not note
        _store(observation, marks, node=report.node, memory_gb=gb, observed=observed, note=note)
        written += observed
    if not key:
        return written
    for worker, attempt in _killed(task, kills):
        if f"{worker}-{attempt}" in recorded:  # observed from its sound report
            continue
        observation = rows.kill(key, worker, attempt)
        _store(observation, marks, node="", memory_gb=rows.memory_gb(worker, attempt))
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
    killed = _killed(task, kills)
    if not key or not killed:
        return 0
    rows = _Rows(task, plan)
    found = [rows.kill(key, worker, attempt) for worker, attempt in killed]
    Observation.objects.bulk_create(found, ignore_conflicts=True)
    return len(found)


def _killed(task: Task, kills: Mapping[str, Sequence[int]]) -> list[tuple[str, int]]:
    """The attempts of a task's workers the OOM killer killed, as (worker, attempt), in order."""
    return [
        (worker, attempt)
        for worker, attempts in sorted(kills.items())
        if task_of(worker, {task.task_id}) is not None
        for attempt in attempts
    ]


class _Rows:
    """The attempt rows of a task, and what they say of an attempt: the memory it ran with and,
    killed for memory without a report, its observation."""

    def __init__(self, task: Task, plan: TaskPlan) -> None:
        self.task, self.plan = task, plan
        self.rows = {(a.worker, a.attempt): a for a in Attempt.objects.filter(task=task)}
        self.exits: dict[str, dict[int, int | None]] = {}
        for (worker, number), row in self.rows.items():
            self.exits.setdefault(worker, {})[number] = 137 if row.oom_killed else row.exit_code

    def memory_gb(self, worker: str, attempt: int, report: WorkerReport | None = None) -> float:
        """The memory an attempt ran with (``attempt_memory_gb``)."""
        row = self.rows.get((worker, attempt))
        return attempt_memory_gb(
            self.plan,
            attempt=attempt,
            exits=self.exits.get(worker, {}),
            known_gb=row.memory_gb if row is not None else None,
            report=report,
        )

    def kill(self, key: str, worker: str, attempt: int) -> Observation:
        """A kill for memory without a report, observed in the plan's shape at the limit its
        attempt ran with (Ruling 24)."""
        plan = self.plan
        return Observation(
            task_type=key,
            run_id=self.task.run_id,
            task=self.task,
            worker=worker,
            attempt=attempt,
            processes=plan.processes,
            per_worker_gb=plan.per_worker_gb,
            limit_bytes=int(self.memory_gb(worker, attempt) * GIB),
            seconds=_seconds(self.rows.get((worker, attempt))),
            oom=True,
            from_report=False,
            features=plan.features,
        )
