"""What a backend's status means: the states of the tasks and a run's verdict (Ruling 17b).

Functions of one poll of one live run, which read the record and the store but write
nothing: ``runs.control.polling`` writes what they decide, compare-and-set. The state of a run
is the service's, not the backend's (Ruling 17b).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from harness import untrusted
from harness.merge import MERGED_MARKER
from harness.report import PROGRESS_FAILED, PROGRESS_UNIT, WorkerReport
from runs.backends.base import (
    PREEMPTED_PHASE,
    RETRYING_PHASE,
    BackendStatus,
    TaskPlan,
    worker_of_node,
)
from runs.common import store
from runs.common.store import TaskFolder
from runs.control.failures import (
    FAILED_PHASES,
    Failures,
    as_time,
    exit_codes,
    read_failures,
    why_failed,
)
from runs.control.observations import attempt_memory_gb
from runs.control.reports import read_unrefused, report_names, task_of
from runs.models import FINAL_TASK_STATES, Attempt, Run, RunState, Task, TaskKind, TaskState

log = logging.getLogger(__name__)

SKIPPED_PHASES = frozenset({"Skipped", "Omitted"})
ENDED_PHASES = frozenset({"Succeeded", "Failed", "Error"})
ACTIVE_STATES = frozenset({TaskState.RUNNING, TaskState.PREEMPTED, TaskState.RETRYING})
STARTED_STATES = ACTIVE_STATES | {TaskState.DONE}
PROGRESS_BYTES_PER_UNIT = 512
PROGRESS_MIN_CAP = 64 * 1024


def has_merge_marker(folder: TaskFolder) -> bool:
    """Whether the output of a task has the marker of a merge, ``out/.simrun-merged``.

    The directories are listed instead of looking the marker up: on NFS a listing
    revalidates a directory, while a lookup may answer from a cached negative entry of a
    lookup before the pod wrote the file. The task directory is listed first, so a cached
    negative entry of ``out/`` itself does not hide it either. False without ``out/`` (or
    with a link in its place: listed by descriptor, nothing is followed).
    """
    listed = untrusted.list_dir(folder.base, folder.parts)
    if not any(e.name == "out" and e.is_dir for e in listed):
        return False
    return any(e.name == MERGED_MARKER for e in untrusted.list_dir(folder.base, folder / "out"))


def task_states(
    *,
    kinds: Mapping[str, str],
    status: BackendStatus,
    plans: Mapping[str, TaskPlan],
    merge_state: Callable[[str], TaskState],
) -> dict[str, TaskState]:
    """The state of every task of a workflow from the phases of its DAG nodes.

    A split task is done when ``<task>-merge`` succeeded, or, when its coordinator merges,
    what ``merge_state`` says once ``<task>-w0`` succeeded (done with the marker, running while
    it is awaited, failed after); it failed when ``<task>-w0`` or its merge failed; an extra
    worker never fails it. An unsplit task is its node ``<task>``. A task is running when
    one of its pods runs (or its coordinator is done and the merge waits), preempted when none
    runs and an evicted pod waits for its retry, retrying when none runs and a pod that
    failed otherwise waits for its retry, queued when it has pods of which none runs,
    waiting without pods.
    """
    states: dict[str, TaskState] = {}
    for task_id, kind in kinds.items():
        if kind == TaskKind.SPLIT:
            merges = plans[task_id].coordinator_merges
            states[task_id] = _split_state(task_id, status.tasks, merges, merge_state)
        else:
            states[task_id] = _unsplit_state(status.tasks.get(task_id))
    return states


def _split_state(
    task_id: str,
    nodes: Mapping[str, str],
    coordinator_merges: bool,
    merge_state: Callable[[str], TaskState],
) -> TaskState:
    coordinator = nodes.get(f"{task_id}-w0")
    merge = nodes.get(f"{task_id}-merge")
    if coordinator in FAILED_PHASES or merge in FAILED_PHASES:
        return TaskState.FAILED
    if coordinator in SKIPPED_PHASES:
        return TaskState.SKIPPED
    if coordinator == "Succeeded":
        if coordinator_merges:
            return merge_state(task_id)
        if merge == "Succeeded":
            return TaskState.DONE
        if merge in SKIPPED_PHASES:
            return TaskState.FAILED
        if merge == PREEMPTED_PHASE:
            return TaskState.PREEMPTED
        if merge == RETRYING_PHASE:
            return TaskState.RETRYING
        return TaskState.RUNNING
    extras = f"{task_id}-extra("
    pods = [coordinator, merge, *(p for n, p in nodes.items() if n.startswith(extras))]
    return _pods_state([p for p in pods if p is not None])


def _pods_state(phases: list[str]) -> TaskState:
    """The state of a task that is not decided from the phases of its pods."""
    if "Running" in phases:
        return TaskState.RUNNING
    if PREEMPTED_PHASE in phases:
        return TaskState.PREEMPTED
    if RETRYING_PHASE in phases:
        return TaskState.RETRYING
    return TaskState.QUEUED if phases else TaskState.WAITING


def _unsplit_state(phase: str | None) -> TaskState:
    if phase is None:
        return TaskState.WAITING
    if phase == "Succeeded":
        return TaskState.DONE
    if phase in FAILED_PHASES:
        return TaskState.FAILED
    if phase in SKIPPED_PHASES:
        return TaskState.SKIPPED
    return _pods_state([phase])


@dataclass
class Poll:
    """What one poll decided about a live run: the record to write."""

    states: dict[str, TaskState]
    messages: dict[str, str]
    merge_pending: dict[str, float]
    oom_kills: dict[str, list[int]]
    failed_seen: int
    attempts: list[Attempt] = field(default_factory=list)
    reports_pending: dict[str, float] = field(default_factory=dict)
    verdict: RunState | None = None
    message: str = ""
    workflow_exists: bool = True
    attempts_seen: dict[str, str] | None = None
    """``Run.attempts_seen`` after the poll; None: unchanged."""


def observe(
    run: Run, tasks: list[Task], plans: Mapping[str, TaskPlan], status: BackendStatus, now: float
) -> Poll:
    """Map the status of a run's workflow onto its tasks and decide the run."""
    grace = settings.SIMRUN_MERGE_MARKER_GRACE_S
    stored = {t.task_id: t for t in tasks}
    failed_seen = sum(len(a) for a in status.failed.values())
    found = Failures(kills=run.oom_kills, reports_pending=run.reports_pending)
    if failed_seen != run.failed_seen or run.reports_pending:
        found = read_failures(run, stored, plans, status, now)
        # An attempt whose report is awaited is not seen yet: the next poll looks again.
        failed_seen -= len(found.reports_pending)
    kills, attempts = found.kills, found.rows
    merge_pending = dict(run.merge_pending)

    def merge_state(task_id: str) -> TaskState:
        if stored[task_id].state == TaskState.DONE:
            return TaskState.DONE
        if has_merge_marker(store.task_folder(run.id, task_id)):
            return TaskState.DONE
        first = merge_pending.setdefault(task_id, now)
        return TaskState.RUNNING if now - first < grace else TaskState.FAILED

    kinds = {t.task_id: t.kind for t in tasks if not t.reused_whole}
    states = task_states(kinds=kinds, status=status, plans=plans, merge_state=merge_state)
    # A task done from earlier outputs is not in the workflow (docs/resume.md).
    states.update({t.task_id: TaskState.DONE for t in tasks if t.reused_whole})
    killed_twice = found.killed_with_retry
    messages = {}
    for task_id, state in states.items():
        if stored[task_id].state == TaskState.FAILED:
            messages[task_id] = stored[task_id].message
        elif task_id in killed_twice:
            states[task_id], messages[task_id] = TaskState.FAILED, killed_twice[task_id]
        elif state == TaskState.FAILED:
            messages[task_id] = why_failed(task_id, kinds[task_id], status, plans[task_id], grace)
        elif task_id in merge_pending and state == TaskState.RUNNING:
            messages[task_id] = f"waiting for out/{MERGED_MARKER} of the coordinator's merge"
        else:  # a task ready to start says why it waits, if its backend says
            messages[task_id] = status.waiting.get(task_id, status.waiting.get(f"{task_id}-w0", ""))
    merge_pending = {t: s for t, s in merge_pending.items() if states[t] not in FINAL_TASK_STATES}
    started, poll_seen = _started(run, stored, plans, status, now)
    poll = Poll(states, messages, merge_pending, kills, failed_seen, attempts + started)
    poll.reports_pending = found.reports_pending
    poll.attempts_seen = poll_seen
    _decide(poll, [t.task_id for t in tasks], status)
    return poll


def _started(
    run: Run,
    stored: Mapping[str, Task],
    plans: Mapping[str, TaskPlan],
    status: BackendStatus,
    now: float,
) -> tuple[list[Attempt], dict[str, str]]:
    """The rows of the attempts that started or succeeded since the last poll, and what is
    seen now (``Run.attempts_seen``: worker -> ``"<attempt> <phase>"``).

    A node running or succeeded is its latest attempt, the one after its failed ones. A
    running attempt gets its row at once: its node, start and the memory it was given; one
    that succeeded, its end and the memory its report says it had.
    """
    seen = dict(run.attempts_seen)
    found = []
    reports: dict[str, dict[tuple[str, int], str]] = {}
    for node, phase in status.tasks.items():
        worker = worker_of_node(node)
        task_id = task_of(worker, stored)
        if phase not in SEEN_PHASES or task_id is None:
            continue
        failed = status.failed.get(worker, [])
        attempt = len(failed)
        if seen.get(worker) == f"{attempt} {phase}":
            continue
        seen[worker] = f"{attempt} {phase}"
        task = stored[task_id]
        report = None
        if phase == "Succeeded":
            folder = store.task_folder(task.run_id, task_id)
            if task_id not in reports:
                reports[task_id] = report_names(folder)
            name = reports[task_id].get((worker, attempt))
            mark = f"{worker}-{attempt}"
            report = read_unrefused(folder, name, mark) if name else None
        memory = attempt_memory_gb(
            plans[task_id],
            attempt=attempt,
            exits=exit_codes(failed),
            report=report,
        )
        found.append(
            Attempt(
                task=task,
                worker=worker,
                attempt=attempt,
                phase=phase,
                exit_code=0 if phase == "Succeeded" else None,
                node_name=status.hosts.get(node, ""),
                memory_gb=memory,
                started_at=as_time(status.started.get(node)),
                ended_at=_ended(report, task, now) if phase == "Succeeded" else None,
            )
        )
    return found, seen


SEEN_PHASES = frozenset({"Running", "Succeeded"})
"""The phases of a node whose latest attempt gets its row (failed ones: ``_failures``)."""


def _ended(report: WorkerReport | None, task: Task, now: float) -> datetime:
    """When a succeeded attempt ended: as its report says, else its task's end, else now."""
    if report is not None and report.started is not None:
        end = report.started + report.prepare_seconds + report.seconds
        return datetime.fromtimestamp(min(end, now), tz=UTC)
    return task.ended_at or datetime.fromtimestamp(now, tz=UTC)


def _decide(poll: Poll, order: list[str], status: BackendStatus) -> None:
    """The verdict of a run from its task states and the phase of its workflow."""
    states = poll.states
    failed = [t for t in order if states[t] == TaskState.FAILED]
    if failed:
        poll.verdict = RunState.FAILED
        poll.message = f"task {failed[0]} failed: {poll.messages[failed[0]]}"
    elif all(states[t] == TaskState.DONE for t in order):
        poll.verdict = RunState.SUCCEEDED
    elif all(states[t] in FINAL_TASK_STATES for t in order):
        skipped = [t for t in order if states[t] == TaskState.SKIPPED]
        poll.verdict = RunState.FAILED
        poll.message = f"the workflow skipped {_named(skipped)}"
    elif status.phase in ENDED_PHASES and not poll.merge_pending:
        open_ = [t for t in order if states[t] not in FINAL_TASK_STATES]
        for task_id in open_:
            if states[task_id] != TaskState.WAITING:
                states[task_id] = TaskState.FAILED
                poll.messages[task_id] = f"the workflow ended {status.phase} before it finished"
        detail = f": {status.message}" if status.message else ""
        poll.verdict = RunState.FAILED
        poll.message = f"the workflow ended {status.phase}{detail} before {_named(open_)} finished"


def _named(task_ids: list[str]) -> str:
    """``task a`` or ``tasks a, b``."""
    return ("task " if len(task_ids) == 1 else "tasks ") + ", ".join(task_ids)


def resolve_gone(run: Run, tasks: list[Task], now: float) -> Poll:
    """The tasks of a run whose workflow is gone, from the record and the store (Ruling 23).

    A split task whose merge wrote ``out/.simrun-merged`` is done; one waiting for the
    marker of its merge keeps the run open until the marker is there or its wait is over;
    only the tasks still undetermined fail.
    """
    grace = settings.SIMRUN_MERGE_MARKER_GRACE_S
    states: dict[str, TaskState] = {}
    messages: dict[str, str] = {}
    merge_pending: dict[str, float] = {}
    for task in tasks:
        states[task.task_id], messages[task.task_id] = TaskState(task.state), task.message
        if task.state in FINAL_TASK_STATES:
            continue
        first = run.merge_pending.get(task.task_id)
        if task.kind == TaskKind.SPLIT and has_merge_marker(
            store.task_folder(run.id, task.task_id)
        ):
            states[task.task_id] = TaskState.DONE
        elif first is not None and now - first < grace:
            merge_pending[task.task_id] = first
        elif first is not None:
            states[task.task_id] = TaskState.FAILED
            messages[task.task_id] = f"no out/{MERGED_MARKER} within {grace:g} s"
        else:
            states[task.task_id] = TaskState.FAILED
            messages[task.task_id] = "undetermined: the workflow is gone"
    poll = Poll(states, messages, merge_pending, run.oom_kills, run.failed_seen)
    poll.workflow_exists = False
    if merge_pending:
        return poll
    order = [t.task_id for t in tasks]
    failed = [t for t in order if states[t] != TaskState.DONE]
    if failed:
        poll.verdict = RunState.FAILED
        poll.message = (
            f"the workflow is gone (deleted before its end was seen); "
            f"task {failed[0]}: {messages[failed[0]] or states[failed[0]]}"
        )
    else:
        poll.verdict = RunState.SUCCEEDED
    return poll


def task_changes(
    task: Task, state: TaskState, message: str, *, stopped_by: str = ""
) -> dict[str, Any]:
    """The fields of a task to write for its new state, units done included; ``stopped_by``:
    the end of its run (cancelled, failed) that stopped it while it ran (``stopped_tasks``)."""
    changes: dict[str, Any] = {}
    if state != task.state:
        changes["state"] = state
    if message != task.message:
        changes["message"] = message
    if stopped_by and not task.stopped_by:
        changes["stopped_by"] = stopped_by
    if state in STARTED_STATES and task.started_at is None:
        changes["started_at"] = timezone.now()
    if state in FINAL_TASK_STATES and task.ended_at is None:
        changes["ended_at"] = timezone.now()
    if state == TaskState.DONE:
        if task.kind == TaskKind.SPLIT:
            changes.update(_progress(task))  # the failed units of its last lines
        if task.units_done != task.units_total:
            changes["units_done"] = task.units_total
    elif task.kind == TaskKind.SPLIT and (state in ACTIVE_STATES or "state" in changes):
        changes.update(_progress(task))
    return changes


def progress_cap(units_total: int) -> int:
    """The most of ``progress.jsonl`` the controller reads: a line per unit is some tens of
    bytes, so a file beyond this is padded (a sparse giant) and its tail is not believed."""
    return max(PROGRESS_MIN_CAP, units_total * PROGRESS_BYTES_PER_UNIT)


def _progress(task: Task) -> dict[str, Any]:
    """The units done of a split task from ``progress.jsonl``, read from where the last poll
    stopped (``progress_bytes``), at most ``SIMRUN_PROGRESS_READ_MB`` a poll and
    ``progress_cap`` in all (a regular file reached without a link): a poll costs the same
    however long the sweep, and a padded giant costs a bounded read a poll until the cap.
    The distinct units of what was read are added to the count (a unit recorded again at a
    later poll counts twice, never beyond the task's units; its end sets them all)."""
    folder = store.task_folder(task.run_id, task.task_id)
    start = task.progress_bytes
    budget = min(
        int(settings.SIMRUN_PROGRESS_READ_MB * 2**20), progress_cap(task.units_total) - start
    )
    if budget <= 0:
        return {}
    try:
        with untrusted.open_file(folder.base, folder / "progress.jsonl") as file:
            if os.fstat(file.fileno()).st_size <= start:
                return {}
            file.seek(start)
            data = file.read(budget)
    except OSError:
        return {}
    end = data.rfind(b"\n") + 1
    if not end and len(data) == budget:
        end = len(data)  # a "line" longer than a whole read is no progress line: passed over
    fresh = len(set(PROGRESS_UNIT.findall(data, 0, end)))
    changes: dict[str, Any] = {}
    if end:
        changes["progress_bytes"] = start + end
    done = min(task.units_done + fresh, task.units_total)
    if done != task.units_done:
        changes["units_done"] = done
    return changes | _failures(task, data[:end])


def _failures(task: Task, data: bytes) -> dict[str, Any]:
    """The failed units of fresh progress lines added to the task's count (as units done
    are), and the first one's why kept when it has none yet."""
    failed = dict(PROGRESS_FAILED.findall(data))
    if not failed:
        return {}
    changes: dict[str, Any] = {
        "units_failed": min(task.units_failed + len(failed), task.units_total)
    }
    if not task.unit_failure:
        first = failed[min(failed, key=int)]
        try:
            why = json.loads(first)
        except ValueError:
            why = first.decode(errors="replace")
        changes["unit_failure"] = str(why)[: Task._meta.get_field("unit_failure").max_length]
    return changes
