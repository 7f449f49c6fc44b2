"""Helpers of the local backend's tests: runs of command tasks, a stepping backend, polling."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.tasktypes import task_types
from runs.backends.base import ClusterConfig, RunRecord, TaskPlan, TaskRecord
from runs.backends.local.backend import LocalBackend, workflow_name
from runs.backends.local.submissions import live, read_json
from runs.backends.local.wake import notify
from tests.polling import wait_for


def plan(
    cores: int = 1, memory_gb: float = 1.0, retry_memory_gb: float = 2.0, per_worker_gb=None
) -> TaskPlan:
    """A plan as the planner makes it for the local backend: the coordinator merges."""
    return TaskPlan(
        cores=cores,
        memory_gb=memory_gb,
        base_gb=0.0,
        per_worker_gb=per_worker_gb or memory_gb,
        retry_memory_gb=retry_memory_gb,
        coordinator_merges=True,
    )


def shell(script: str) -> list[str]:
    return ["sh", "-c", script]


def until_flag(flag: Path, before: str = "", after: str = "") -> list[str]:
    """A command that runs ``before``, waits until ``flag`` exists, then runs ``after``."""
    wait = f"until [ -e {flag} ]; do sleep 0.05; done"
    return shell("; ".join(part for part in (before, wait, after) if part))


def submit(
    backend: LocalBackend,
    run_id: str,
    tasks: dict[str, dict[str, Any]],
    plans: dict[str, TaskPlan] | None = None,
    **record: Any,
) -> str:
    """Submit a run of tasks given as TaskRecord fields; a command task by default."""
    records = {
        task_id: TaskRecord(id=task_id, **({"kind": "command"} | fields))
        for task_id, fields in tasks.items()
    }
    run = RunRecord(id=run_id, tasks=records, store=backend.store, **record)
    plans = {task_id: (plans or {}).get(task_id, plan()) for task_id in tasks}
    return backend.submit(run, plans, task_types(), ClusterConfig())


def phase(backend: LocalBackend, run_id: str, node: str | None = None) -> str | None:
    status = backend.status(workflow_name(run_id))
    return status.tasks.get(node) if node else status.phase


def ended(backend: LocalBackend, run_id: str) -> bool:
    return phase(backend, run_id) in {"Succeeded", "Failed"}


def log_of(backend: LocalBackend, run_id: str, task: str, node: str, attempt: int = 0) -> Path:
    return backend.store / "runs" / run_id / "tasks" / task / "logs" / f"{node}-{attempt}.log"


def read_log(backend: LocalBackend, run_id: str, task: str, node: str, attempt: int = 0) -> str:
    """The log of an attempt so far, empty before it exists."""
    path = log_of(backend, run_id, task, node, attempt)
    return path.read_text() if path.exists() else ""


def process_of(backend: LocalBackend, run_id: str, task: str, node: str, attempt: int = 0) -> int:
    """The pid of the process of an attempt, once its launcher started it."""
    pid_file = log_of(backend, run_id, task, node, attempt).with_suffix(".pid")
    return wait_for(lambda: (read_json(pid_file) or {}).get("pid"), what=f"{pid_file.name}")


def gone(pid: int) -> bool:
    """Whether a process ended: no longer in /proc, or a zombie nobody reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


@contextmanager
def stepping(backend: LocalBackend, poll_s: float = 0.1) -> Iterator[LocalBackend]:
    """The backend with its step running in a thread, as ``simrun serve`` runs it.

    Every run still going at the end is cancelled and its processes killed.
    """
    stop = threading.Event()
    thread = threading.Thread(target=backend.run_steps, args=(stop, poll_s), daemon=True)
    thread.start()
    try:
        yield backend
    finally:
        grace, backend.grace_s = backend.grace_s, 0.0
        for submission in live(backend.state):
            backend.cancel(submission.name)
        wait_for(lambda: not backend.placements(), what="the processes to end")
        stop.set()
        notify(backend.address)  # a step waiting for its next poll returns now
        thread.join()
        backend.grace_s = grace
