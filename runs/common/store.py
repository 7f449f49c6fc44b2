"""The store: the shared filesystem root with every run's task directories.

``<store>/runs/<run>/run.json`` and ``tasks/<task>/task.json`` are what the pods read besides
their environment; every file another process reads is written to a temp file and renamed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from harness.files import write_atomic


def root() -> Path:
    """The root of the store (``SIMRUN_STORE``)."""
    return Path(settings.SIMRUN_STORE)


def pass_only(*roots: Path) -> None:
    """Let others cross these directories without listing or reading them."""
    for root in roots:
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, (root.stat().st_mode & 0o7770) | 0o001)
        os.chmod(root, root.stat().st_mode & ~0o006)


def run_dir(run_id: str) -> Path:
    return root() / "runs" / run_id


def task_dir(run_id: str, task_id: str) -> Path:
    return run_dir(run_id) / "tasks" / task_id


def task_parts(run_id: str, task_id: str) -> tuple[str, ...]:
    """A task's folder as components below the store's root, for ``harness.untrusted``."""
    return ("runs", run_id, "tasks", task_id)


@dataclass(frozen=True)
class TaskFolder:
    """A task's folder named from a folder the service trusts (the store's root): what is
    below ``base`` is walked by ``harness.untrusted`` component by component, never resolved,
    since the task's user can replace any of it by a link, a FIFO or a sparse giant."""

    base: Path
    parts: tuple[str, ...] = ()

    def __truediv__(self, name: str) -> tuple[str, ...]:
        """The components of ``name`` below this folder (``folder / "out"``)."""
        return (*self.parts, *name.split("/"))

    @property
    def path(self) -> Path:
        """The folder as a path, for what only names it (a pod's environment, a message)."""
        return self.base.joinpath(*self.parts)


def task_folder(run_id: str, task_id: str) -> TaskFolder:
    """A task's folder below the store's root."""
    return TaskFolder(root(), task_parts(run_id, task_id))


def snapshot_dir(digest: str) -> Path:
    return root() / "snapshots" / digest


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (``harness.files.write_atomic``), creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
