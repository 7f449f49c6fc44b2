"""What the failed attempts of a run say: its kills for memory, the rows of its attempts, and
why a task failed, in words. Read by a poll (``runs.control.states``) and by the settle of a
cancelled run; writes nothing.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from harness.merge import MERGED_MARKER
from harness.report import WorkerReport
from runs.backends import retry_rule
from runs.backends.base import BackendStatus, FailedAttempt, TaskPlan
from runs.common import store
from runs.control.observations import attempt_memory_gb
from runs.control.reports import read_unrefused, report_names, task_of
from runs.models import Attempt, Run, Task, TaskKind

log = logging.getLogger(__name__)

FAILED_PHASES = frozenset({"Failed", "Error"})

EXIT_MEANINGS = {
    3: "a unit or the merge failed",
    4: "a configuration error",
    75: "the store failed; retried",
    137: "killed",
    143: "stopped on SIGTERM",
}


LOG_PREFIX = re.compile(
    r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"
    r"(?:\S+\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
)
"""The time, program and level a log line starts with (the harness's format): not the why."""


def plain(message: str) -> str:
    """An attempt's message (often its log's last line) without the log line's prefix."""
    return LOG_PREFIX.sub("", message, count=1)


def describe(key: str, attempt: FailedAttempt) -> str:
    """A failed attempt in words, for the message of its task and run."""
    what = f"{key} (attempt {attempt.attempt})"
    message = plain(attempt.message)
    if attempt.oom_killed:
        return f"{what} was killed for memory"
    if attempt.exit_code is None:
        return f"{what} failed: {message or 'no exit code'}"
    meaning = EXIT_MEANINGS.get(attempt.exit_code)
    text = f"{what} exited {attempt.exit_code}" + (f" ({meaning})" if meaning else "")
    return text + (f": {message}" if message else "")


def why_failed(task_id: str, kind: str, status: BackendStatus, plan: TaskPlan, grace: float) -> str:
    """Why a task failed, from the failed attempts of its pods."""
    if kind != TaskKind.SPLIT:
        return _node_failure(task_id, status)
    for node in (f"{task_id}-w0", f"{task_id}-merge"):
        if status.tasks.get(node) in FAILED_PHASES:
            return _node_failure(node, status)
    return (
        f"the coordinator {task_id}-w0 succeeded but wrote no out/{MERGED_MARKER} within "
        f"{grace:g} s: the harness of its image does not merge"
    )


def _node_failure(node: str, status: BackendStatus) -> str:
    attempts = status.failed.get(node)
    if attempts:
        return describe(node, attempts[-1])
    detail = f": {status.message}" if status.message else ""
    return f"{node} {status.tasks.get(node, 'failed')}{detail}"


def read_failures(
    run: Run,
    stored: Mapping[str, Task],
    plans: Mapping[str, TaskPlan],
    status: BackendStatus,
    now: float,
) -> Failures:
    """The OOM kills of a run and the rows of its failed attempts.

    A kill for memory needs the OOM killer's evidence (Rulings 34, 39): the backend's
    OOMKilled, or the report of an attempt that exited 137 counting kills in its cgroup. An
    exit 137 whose report cannot be read yet is decided at a later poll; without a report
    after ``SIMRUN_REPORT_GRACE_S`` it was a kill after the grace period: an eviction. Each
    attempt's memory is the one it ran with (``attempt_memory_gb``); a kill of an attempt
    that had the retry memory, its second proven one, fails its task (Ruling 35).
    """
    grace = settings.SIMRUN_REPORT_GRACE_S
    found = Failures(kills={w: list(a) for w, a in run.oom_kills.items()})
    listed: dict[str, dict[tuple[str, int], str]] = {}
    for key, failed in status.failed.items():
        task_id = task_of(key, stored)
        if task_id is None:
            log.warning("run %s: failed attempts of %s, a pod of no task", run.id, key)
            continue
        if task_id not in listed:
            listed[task_id] = report_names(store.task_folder(run.id, task_id))
        plan = plans[task_id]
        exits = exit_codes(failed)
        for attempt in failed:
            # The report is read only where it decides something: the evidence of an exit
            # 137, or the memory of an attempt its backend does not know.
            needed = (attempt.exit_code == 137 and not attempt.oom_killed) or not attempt.memory_gb
            name = listed[task_id].get((key, attempt.attempt)) if needed else None
            folder = store.task_folder(run.id, task_id)
            mark = f"{key}-{attempt.attempt}"
            report = read_unrefused(folder, name, mark) if name else None
            evidence, note = _evidence(attempt, report)
            name = f"{key}-{attempt.attempt}"
            if attempt.exit_code == 137 and not evidence and report is None:
                first = run.reports_pending.get(name, now)
                if now - first < grace:
                    found.reports_pending[name] = first
                    continue
                note = f"no report within {grace:g} s: counted as a kill after the grace period"
            memory = attempt_memory_gb(
                plan,
                attempt=attempt.attempt,
                exits=exits,
                known_gb=attempt.memory_gb,
                report=report,
            )
            oom = bool(evidence)
            if oom and attempt.attempt not in found.kills.get(key, []):
                found.kills.setdefault(key, []).append(attempt.attempt)
                found.kills[key].sort()
            killed = found.kills.get(key, [])
            before = attempt.attempt - 1
            is_retry = before in killed or retry_rule.gets_retry_memory(exits.get(before))
            if (
                oom
                and retry_rule.fails_the_run(proven_kills=len(killed), is_retry=is_retry)
                and task_id not in found.killed_with_retry
            ):
                found.killed_with_retry[task_id] = (
                    f"{key} was killed for memory again with the retry memory {memory:g} GiB "
                    f"(attempts {', '.join(map(str, killed))})"
                )
            found.rows.append(
                Attempt(
                    task=stored[task_id],
                    worker=key,
                    attempt=attempt.attempt,
                    phase="Failed",
                    exit_code=attempt.exit_code,
                    oom_killed=oom,
                    oom_evidence=evidence,
                    message=note,
                    evicted=attempt.evicted or (attempt.exit_code == 137 and not oom),
                    node_name=attempt.node or "",
                    memory_gb=memory,
                    reason=attempt.reason,
                    started_at=as_time(attempt.started_at),
                    ended_at=as_time(attempt.ended_at),
                )
            )
    return found


def exit_codes(failed: list[FailedAttempt]) -> dict[int, int | None]:
    """The exit code of each failed attempt, a kill for memory as 137 (the retry rule's)."""
    return {a.attempt: 137 if a.oom_killed else a.exit_code for a in failed}


def as_time(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


def ended_attempts(run: Run, tasks: list[Task], status: BackendStatus) -> list[Attempt]:
    """The rows of a run's failed attempts as they ended, a kill without a report included
    (its report is awaited no longer): for a run whose status is no longer polled."""
    stored = {t.task_id: t for t in tasks}
    plans = {t.task_id: TaskPlan.model_validate(t.plan) for t in tasks}
    return read_failures(run, stored, plans, status, now=math.inf).rows


def _evidence(attempt: FailedAttempt, report: WorkerReport | None) -> tuple[str, str]:
    """The OOM killer's evidence of a failed attempt ("" without), and a note on what was read."""
    if attempt.oom_killed:
        return "OOMKilled", ""
    if attempt.exit_code != 137 or report is None:
        return "", ""
    if report.oom_kills > 0:
        return f"exit 137; the report counts {report.oom_kills} OOM kill(s) in its cgroup", ""
    return "", ""


@dataclass
class Failures:
    """What the failed attempts of a run say: its kills, rows, and what waits for a report."""

    kills: dict[str, list[int]]
    rows: list[Attempt] = field(default_factory=list)
    killed_with_retry: dict[str, str] = field(default_factory=dict)
    reports_pending: dict[str, float] = field(default_factory=dict)
