"""A scriptable backend for the tests of the controller, the API and the Celery loop.

A test scripts what the backend reports (workflow and node phases, failed attempts with exit
codes and OOMKilled, evictions, a workflow that vanishes, nodes and reservations, logs,
placements, images) and which calls fail, and reads back every call it got (``calls``).
In memory by default; with ``state_file`` (``SIMRUN_FAKE_STATE`` for ``from_settings``) the
state is a JSON file under an ``flock``, so a Celery worker in another process and the test
that scripts it share one backend.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from harness.files import write_atomic
from harness.tasktypes import TaskType
from runs.backends import logs
from runs.backends.base import (
    BackendStatus,
    BackendUnavailable,
    ClusterConfig,
    FailedAttempt,
    KeptLogs,
    NodeInfo,
    Placement,
    PodLog,
    RunRecord,
    TaskPlan,
    workflow_name,
)
from runs.backends.nodes import choose_node
from runs.common.store import TaskFolder

ERRORS: dict[str, type[Exception]] = {
    "KeyError": KeyError,
    "ValueError": ValueError,
    "RuntimeError": RuntimeError,
    "BackendUnavailable": BackendUnavailable,
}


class Submitted(BaseModel):
    """What a workflow was submitted with."""

    record: RunRecord
    plans: dict[str, TaskPlan]


class FakeState(BaseModel):
    """Everything the fake backend knows; the JSON of its state file."""

    workflows: dict[str, BackendStatus] = Field(default_factory=dict)
    submitted: dict[str, Submitted] = Field(default_factory=dict)
    logs: dict[str, dict[str, list[PodLog]]] = Field(default_factory=dict)
    nodes: dict[str, NodeInfo] = Field(default_factory=dict)
    images: list[str] = Field(default_factory=list)
    placements: list[Placement] = Field(default_factory=list)
    failures: dict[str, list[tuple[str, str]]] = Field(
        default_factory=dict, description="method -> errors its next calls raise, in order"
    )
    calls: list[tuple[str, list[Any]]] = Field(default_factory=list)


class FakeBackend:
    """Workflows a test scripts; every call is recorded in ``calls``."""

    name = "fake"
    largest_node = "the largest node"
    logs_in_store = False

    def __init__(
        self,
        *,
        runs_images: bool = False,
        extra_workers: bool = True,
        enforces_memory: bool = True,
        max_cores: int | None = None,
        max_memory_gb: float | None = None,
        state_file: Path | None = None,
    ) -> None:
        self.runs_images = runs_images
        self.extra_workers = extra_workers
        self.reserves_nodes = True
        self.no_reservations = ""
        self.enforces_memory = enforces_memory
        self.max_cores = max_cores
        self.max_memory_gb = max_memory_gb
        self.state_file = state_file
        self.callbacks: list[Callable[[], None]] = []
        self.on_call: Callable[[str], None] | None = None
        """Called with the name of every protocol call before it runs (e.g. to check locks)."""
        self._memory = FakeState()
        self._digests: dict[str, str] = {}
        """Each workflow's ``versions`` digest, in memory, while no one entered ``state()``:
        the answer of a backend that holds its statuses (a watch's cache) costs a lookup."""

    @classmethod
    def from_settings(cls) -> FakeBackend:
        """The fake of a process: in memory, or shared through ``SIMRUN_FAKE_STATE``."""
        path = os.environ.get("SIMRUN_FAKE_STATE")
        return cls(state_file=Path(path) if path else None)

    @contextmanager
    def state(self) -> Iterator[FakeState]:
        """The state to read or change; from and back to the state file when there is one."""
        if self.state_file is None:
            self._digests = {}  # whoever enters may change any status
            yield self._memory
            return
        with open(f"{self.state_file}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                text = self.state_file.read_text() if self.state_file.exists() else "{}"
                current = FakeState.model_validate_json(text)
                try:
                    yield current
                finally:
                    write_atomic(self.state_file, current.model_dump_json())
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _call(self, state: FakeState, method: str, *args: Any) -> None:
        """Record a call, tell ``on_call``, raise the next failure scripted for the method."""
        if self.on_call is not None:
            self.on_call(method)
        state.calls.append((method, list(args)))
        queued = state.failures.get(method)
        if queued:
            kind, message = queued.pop(0)
            raise ERRORS[kind](message)

    # Scripting, for tests.

    @property
    def calls(self) -> list[tuple[str, list[Any]]]:
        """Every protocol call so far: (method, arguments)."""
        with self.state() as state:
            return list(state.calls)

    def called(self, method: str) -> list[list[Any]]:
        """The arguments of every call of one method."""
        return [args for name, args in self.calls if name == method]

    def fail_next(self, method: str, kind: str = "RuntimeError", message: str = "") -> None:
        """Make the next call of ``method`` raise ``kind``, a name in ``ERRORS``."""
        with self.state() as state:
            error = message or f"{method} failed (scripted)"
            state.failures.setdefault(method, []).append((kind, error))

    def workflow(self, name: str) -> BackendStatus:
        """The status of a workflow as scripted (KeyError when there is none)."""
        with self.state() as state:
            return state.workflows[name].model_copy(deep=True)

    def submission(self, name: str) -> Submitted:
        """What a workflow was submitted with."""
        with self.state() as state:
            return state.submitted[name]

    def set_phase(self, name: str, phase: str, message: str = "") -> None:
        """Set the phase of a workflow."""
        with self.state() as state:
            state.workflows[name].phase = phase
            state.workflows[name].message = message

    def set_nodes(self, name: str, nodes: dict[str, str]) -> None:
        """Set the phases of DAG nodes (``sweep-w0``, ``sweep-merge``, ``plot``...)."""
        with self.state() as state:
            state.workflows[name].tasks.update(nodes)

    def dag_nodes(self, name: str) -> list[str]:
        """The DAG nodes of a submitted workflow, as the Argo backend names them."""
        with self.state() as state:
            submitted = state.submitted[name]
        nodes = []
        for task_id, task in submitted.record.tasks.items():
            if task_id in submitted.record.reused:
                continue  # done before the run, not in its workflow
            plan = submitted.plans[task_id]
            if task.kind != "split":
                nodes.append(task_id)
                continue
            nodes.append(f"{task_id}-w0")
            nodes += [f"{task_id}-extra({i - 1}:{i})" for i in range(1, plan.workers)]
            if not plan.coordinator_merges:
                nodes.append(f"{task_id}-merge")
        return nodes

    def finish(self, name: str, phase: str = "Succeeded") -> None:
        """End a workflow: every DAG node and the workflow in ``phase``."""
        nodes = dict.fromkeys(self.dag_nodes(name), phase)
        with self.state() as state:
            state.workflows[name].tasks.update(nodes)
            state.workflows[name].phase = phase

    def fail_attempt(
        self,
        name: str,
        worker: str,
        *,
        attempt: int,
        exit_code: int | None = None,
        oom_killed: bool = False,
        evicted: bool = False,
        node: str | None = None,
        message: str = "",
    ) -> None:
        """Add a failed attempt of a worker id, an unsplit task id or a ``<task>-merge``."""
        failed = FailedAttempt(
            attempt=attempt,
            exit_code=exit_code,
            oom_killed=oom_killed,
            evicted=evicted,
            node=node,
            message=message,
        )
        with self.state() as state:
            state.workflows[name].failed.setdefault(worker, []).append(failed)

    def vanish(self, name: str) -> None:
        """Delete a workflow, as its time to live does: its status is a KeyError from now."""
        with self.state() as state:
            del state.workflows[name]
            state.logs.pop(name, None)

    def add_node(
        self, node: str, *, cores: float = 8, memory_gb: float = 32, ready: bool = True
    ) -> None:
        """Add a node of the cluster."""
        with self.state() as state:
            state.nodes[node] = NodeInfo(name=node, cores=cores, memory_gb=memory_gb, ready=ready)

    def reserved_by(self, node: str) -> str | None:
        """The run holding a node."""
        with self.state() as state:
            return state.nodes[node].reserved_by

    def set_logs(self, name: str, task_id: str, logs: list[PodLog]) -> None:
        """Set the logs of the pods of a task."""
        with self.state() as state:
            state.logs.setdefault(name, {})[task_id] = logs

    def set_placements(self, placements: list[Placement]) -> None:
        """Set the pods that have not terminated."""
        with self.state() as state:
            state.placements = placements

    def add_image(self, ref: str) -> None:
        """Put an image into the registry."""
        with self.state() as state:
            state.images.append(ref)

    def notify(self) -> None:
        """Call the subscribed callbacks, as a backend does when a run changed."""
        for callback in self.callbacks:
            callback()

    # The protocol.

    def submit(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str:
        """Create the workflow ``simrun-<run>``; one that exists is taken as submitted."""
        name = workflow_name(record.id)
        with self.state() as state:
            self._call(state, "submit", record.id)
            state.workflows.setdefault(name, BackendStatus(phase="Pending"))
            state.submitted[name] = Submitted(record=record, plans=plans)
        return name

    def refusal(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str | None:
        return None  # nothing of a run's size is bounded here beyond what planning checks

    def subscribe(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def status(self, name: str) -> BackendStatus:
        with self.state() as state:
            self._call(state, "status", name)
            return state.workflows[name].model_copy(deep=True)

    def versions(self, names: list[str]) -> dict[str, str]:
        """A digest of each known workflow's status (``ChangeSignal``): one call for all, and
        a status a test changed in any way, even in ``state()`` directly, has another."""
        if self.state_file is not None:
            with self.state() as state:
                self._call(state, "versions", len(names))
                return {
                    name: _digest(state.workflows[name])
                    for name in names
                    if name in state.workflows
                }
        self._call(self._memory, "versions", len(names))
        workflows, digests = self._memory.workflows, self._digests
        for name in names:
            if name not in digests and name in workflows:
                digests[name] = _digest(workflows[name])
        return {name: digests[name] for name in names if name in digests}

    def cancel(self, name: str) -> None:
        with self.state() as state:
            self._call(state, "cancel", name)
            state.workflows[name].message = "Stopped with strategy 'Terminate'"
            state.workflows[name].phase = "Failed"  # as Argo ends a terminated workflow

    def stop(self, name: str) -> None:
        with self.state() as state:
            self._call(state, "stop", name)
            state.workflows[name].message = "Stopped with strategy 'Stop'"

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        with self.state() as state:
            self._call(state, "logs", name, task_id)
            if name not in state.workflows:
                raise KeyError(name)
            logs = state.logs.get(name, {}).get(task_id, [])
        if tail_lines is None:
            return logs
        return [
            log.model_copy(update={"text": "".join(log.text.splitlines(True)[-tail_lines:])})
            for log in logs
        ]

    def keep_logs(self, name: str, task_id: str, folder: TaskFolder) -> KeptLogs:
        pods = self.logs(name, task_id)
        return KeptLogs(complete=logs.keep(folder, pods), unread=any(p.unread for p in pods))

    def describe(self) -> list[str]:
        return []

    def isolation_problem(self, owner: int | None = 0, kind: str = "split") -> str | None:
        return None

    def choose_node(self, plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()) -> str:
        return choose_node(self.nodes(), plans, taken=taken)

    def nodes(self) -> list[NodeInfo]:
        with self.state() as state:
            self._call(state, "nodes")
            return list(state.nodes.values())

    def placements(self) -> list[Placement]:
        with self.state() as state:
            self._call(state, "placements")
            return list(state.placements)

    def reserve(self, node: str, run_id: str) -> None:
        with self.state() as state:
            self._call(state, "reserve", node, run_id)
            info = state.nodes[node]
            info.reserved_by = run_id
            info.labels["simrun/reserved"] = run_id

    def unreserve(self, node: str, run_id: str) -> None:
        with self.state() as state:
            self._call(state, "unreserve", node, run_id)
            info = state.nodes[node]
            if info.reserved_by == run_id:
                info.reserved_by = None
                info.labels.pop("simrun/reserved", None)

    def build_image(self, context: Path, ref: str) -> None:
        with self.state() as state:
            self._call(state, "build_image", str(context), ref)
            state.images.append(ref)

    def has_image(self, ref: str) -> bool:
        with self.state() as state:
            self._call(state, "has_image", ref)
            return ref in state.images


def _digest(status: BackendStatus) -> str:
    """16 hex digits of a status: another for a status changed in any way."""
    return hashlib.blake2b(status.model_dump_json().encode(), digest_size=8).hexdigest()
