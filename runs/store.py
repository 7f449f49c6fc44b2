"""The store: the shared filesystem root with every run's task directories.

``<store>/runs/<run>/run.json`` and ``tasks/<task>/task.json`` are what the pods read besides
their environment; every file another process reads is written to a temp file and renamed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings

from harness.files import write_atomic


def root() -> Path:
    """The root of the store (``SIMRUN_STORE``)."""
    return Path(settings.SIMRUN_STORE)


def run_dir(run_id: str) -> Path:
    return root() / "runs" / run_id


def task_dir(run_id: str, task_id: str) -> Path:
    return run_dir(run_id) / "tasks" / task_id


def snapshot_dir(digest: str) -> Path:
    return root() / "snapshots" / digest


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (``harness.files.write_atomic``), creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
