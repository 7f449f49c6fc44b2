"""Task folders as the service writes them into the store, and what the harness leaves in
them: progress, claims, reports."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.report import WorkerReport, read_report, report_path

PLAN = {
    "cores": 2,
    "memory_gb": 1.0,
    "workers": 1,
    "base_gb": 0.1,
    "per_worker_gb": 0.1,
    "processes": 2,
    "retry_memory_gb": 2.0,
    "coordinator_merges": False,
    "why": "tests",
}


def make_task(
    store: Path,
    type_: str,
    settings: Mapping[str, Any],
    *,
    task: str = "sweep",
    run: str = "r1",
    kind: str = "split",
    **plan: Any,
) -> Path:
    """A task directory ``<store>/runs/<run>/tasks/<task>`` with the ``task.json`` of the
    service (``runs/planning/records.py:task_json``)."""
    task_dir = store / "runs" / run / "tasks" / task
    task_dir.mkdir(parents=True)
    data = {
        "run": run,
        "task": task,
        "kind": kind,
        "type": type_,
        "settings": dict(settings),
        "inputs": {},
        "command": None,
        "plan": {**PLAN, **plan},
        "units": None,
    }
    (task_dir / "task.json").write_text(json.dumps(data))
    return task_dir


def progress_units(task_dir: Path) -> list[int]:
    """The units of ``progress.jsonl``, in the order written."""
    path = task_dir / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["unit"] for line in path.read_text().splitlines()]


def claims(task_dir: Path) -> list[str]:
    """The claims in the ledger now."""
    directory = task_dir / "units" / "claims"
    return sorted(os.listdir(directory)) if directory.exists() else []


def report_of(task_dir: Path, worker: str, attempt: int = 0) -> WorkerReport:
    return read_report(report_path(task_dir, worker, attempt))
