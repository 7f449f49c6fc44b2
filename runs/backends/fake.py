"""A scriptable in-memory backend for the tests of the controller and the API."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.tasktypes import TaskType
from runs.backends.base import (
    BackendStatus,
    ClusterConfig,
    NodeInfo,
    Placement,
    PodLog,
    RunRecord,
)
from runs.planner import TaskPlan


class FakeBackend:
    """Workflows as dicts a test scripts; every call is recorded in ``calls``."""

    name = "fake"

    def __init__(
        self,
        *,
        runs_images: bool = False,
        extra_workers: bool = True,
        enforces_memory: bool = True,
        max_cores: int | None = None,
        max_memory_gb: float | None = None,
    ) -> None:
        self.runs_images = runs_images
        self.extra_workers = extra_workers
        self.enforces_memory = enforces_memory
        self.max_cores = max_cores
        self.max_memory_gb = max_memory_gb
        self.workflows: dict[str, BackendStatus] = {}
        self.submitted: dict[str, tuple[RunRecord, dict[str, TaskPlan]]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.callbacks: list[Callable[[], None]] = []

    @classmethod
    def from_settings(cls) -> FakeBackend:
        return cls()

    def submit(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str:
        self.calls.append(("submit", record.id))
        name = f"simrun-{record.id}"
        self.workflows.setdefault(name, BackendStatus(phase="Pending"))
        self.submitted[name] = (record, plans)
        return name

    def subscribe(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def status(self, name: str) -> BackendStatus:
        self.calls.append(("status", name))
        return self.workflows[name]

    def cancel(self, name: str) -> None:
        self.calls.append(("cancel", name))

    def stop(self, name: str) -> None:
        self.calls.append(("stop", name))

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        self.calls.append(("logs", (name, task_id)))
        return []

    def nodes(self) -> list[NodeInfo]:
        return []

    def placements(self) -> list[Placement]:
        return []

    def reserve(self, node: str, run_id: str) -> None:
        self.calls.append(("reserve", (node, run_id)))

    def unreserve(self, node: str, run_id: str) -> None:
        self.calls.append(("unreserve", (node, run_id)))

    def build_image(self, context: Path, ref: str) -> None:
        self.calls.append(("build_image", ref))

    def has_image(self, ref: str) -> bool:
        return True
