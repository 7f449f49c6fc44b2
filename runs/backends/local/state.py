"""The state of a run on the local backend, read from the files of its processes.

A run submitted to the local backend is a list of nodes with the names of its Argo workflow
(``<task>-w0`` for the coordinator of a split task, ``<task>`` for an unsplit one). Each
attempt of a node leaves files in ``<task dir>/logs/``: ``<node>-<attempt>.launch`` (written
when the step started it), ``.log``, ``.pid`` while it runs and ``.exit`` once it ended. The
phases of the nodes, their failed attempts and what may start next follow from these files
and the retry policy of the cluster, so any process can read them (``RunView``, ``status_of``).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness import untrusted
from harness.errors import EXIT_STORAGE
from runs.backends import retry_rule
from runs.backends.base import (
    PREEMPTED_PHASE,
    RETRY_LIMIT,
    RETRYING_PHASE,
    BackendStatus,
    FailedAttempt,
)

Outcome = Literal["succeeded", "oom", "killed", "evicted", "cancelled", "failed"]
"""What an attempt's end means: ``killed`` is a SIGKILL that no cgroup can explain (memory is
not enforced), retried once with the retry memory as a kill for memory would be."""


class NodeSpec(BaseModel):
    """A node of the workflow of a run: what it waits for and what it runs."""

    name: str
    task: str
    worker: str = Field(description="SIMRUN_WORKER: the worker id, the task id when unsplit")
    kind: str
    after: list[str] = Field(default_factory=list, description="Nodes that must succeed first")
    argv: list[str] = Field(default_factory=list, description="Empty for a command in an image")
    command: list[str] = Field(default_factory=list)
    image: str = Field(default="", description="The image of a command run with docker")
    env: dict[str, str] = Field(default_factory=dict)
    stage: list[tuple[str, str]] = Field(
        default_factory=list, description="(store path, scratch path) of the inputs of a command"
    )
    cores: int
    memory_gb: float
    retry_memory_gb: float


class Submission(BaseModel):
    """A run as the local backend keeps it: ``<store>/local/runs/<workflow>.json``."""

    name: str
    run: str
    order: float = Field(description="When the run was submitted: runs take cores in this order")
    store: Path
    nodes: list[NodeSpec]
    snapshots: list[str] = Field(default_factory=list, description="Directories of snapshots")
    packages: list[str] = Field(default_factory=list, description="environment.packages")
    owner: int | None = Field(default=None, description="The id of the user who owns the run")

    def task_dir(self, task: str) -> Path:
        """The directory of a task in the store, as ``RunRecord.task_dir``."""
        return self.store / "runs" / self.run / "tasks" / task


@dataclass
class Attempt:
    """The files of one attempt of a node."""

    node: str
    number: int
    directory: Path
    launch: dict[str, Any] | None = None
    pid: dict[str, Any] | None = None
    exit: dict[str, Any] | None = None

    def path(self, suffix: str) -> Path:
        return self.directory / f"{self.node}-{self.number}.{suffix}"

    @property
    def ended(self) -> bool:
        return self.exit is not None

    @property
    def memory_gb(self) -> float:
        return float((self.launch or {}).get("memory_gb", 0.0))

    @property
    def cores(self) -> int:
        return int((self.launch or {}).get("cores", 0))

    @property
    def started(self) -> float | None:
        """When its process started (Unix time, from its pid file), else when the step
        launched it (its launch file): preparing its venv and inputs is not running."""
        value = (self.pid or {}).get("started", (self.launch or {}).get("started"))
        return float(value) if isinstance(value, int | float) else None

    @property
    def began(self) -> bool:
        """Whether its process started: its pid file names it."""
        return self.pid is not None and "pid" in self.pid


@dataclass
class NodeView:
    """A node with its attempts, oldest first, and what they mean."""

    spec: NodeSpec
    attempts: list[Attempt] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def running(self) -> Attempt | None:
        """The attempt that has not ended, None when none runs."""
        last = self.attempts[-1] if self.attempts else None
        return last if last is not None and not last.ended else None


SERVICE_FILE_CAP = 1 << 20
"""The most the service reads of a launch, pid or exit file of its own."""


def logs_parts(run: str, task: str) -> tuple[str, ...]:
    """The ``logs/`` folder of a task below the store, as components to walk."""
    return ("runs", run, "tasks", task, "logs")


def read_attempts(
    store: Path, run: str, task: str, nodes: Iterable[str]
) -> dict[str, list[Attempt]]:
    """The attempts of some nodes of a task from its ``logs/`` directory, oldest first.

    The folder is walked from the store without links and must be the service's; only its
    regular files of the service's user count: a task that replaced ``logs/`` or planted a
    file there cannot make the service read, or signal, what it chose.
    """
    found: dict[tuple[str, int], Attempt] = {}
    wanted = set(nodes)
    logs = store.joinpath(*logs_parts(run, task))
    by_node: dict[str, list[Attempt]] = {node: [] for node in wanted}
    try:
        fd = untrusted.own_dir(store, logs_parts(run, task))
    except OSError:
        return by_node
    try:
        for entry in untrusted.entries(fd):
            stem, dot, suffix = entry.name.rpartition(".")
            node, dash, number = stem.rpartition("-")
            if not (dot and dash and number.isdigit()) or node not in wanted:
                continue
            if suffix not in {"launch", "pid", "exit"}:
                continue
            if not entry.is_file or entry.uid != os.geteuid():
                continue
            attempt = found.setdefault((node, int(number)), Attempt(node, int(number), logs))
            setattr(attempt, suffix, read_service_json(fd, entry.name))
    finally:
        os.close(fd)
    for (node, _), attempt in sorted(found.items()):
        if attempt.launch is not None:
            by_node[node].append(attempt)
    return by_node


def read_service_json(dir_fd: int, name: str) -> Any:
    """The JSON of a file of the service's own in a folder, None when it is missing, not the
    service's, or not (yet) complete."""
    try:
        return json.loads(untrusted.read_own(dir_fd, name, SERVICE_FILE_CAP))
    except (OSError, ValueError):
        return None


def outcome(exit: dict[str, Any], cancelled_at: float | None) -> Outcome:
    """What the end of an attempt means for its node.

    An attempt over its budget of files failed, whatever its exit: it would do it again. Only
    the count of the out of memory killer proves a kill for memory. One that ended after
    its run was cancelled was cancelled. Only what simrun did is an eviction: a SIGTERM it
    sent without cancelling, a launcher lost with the end unrecorded, or a transient error of
    the store (exit 75), retried as Argo retries it. A SIGKILL (137) without the OOM killer's
    count is ``killed``: retried once with the retry memory, as Argo retries an exit 137 (a
    SIGKILL of one process of a pool loses only its units in flight). Any other end, a signal
    the task sent itself included, is a failure.
    """
    if exit.get("over_budget"):
        return "failed"
    if exit.get("exit_code") == 0:
        return "succeeded"
    if exit.get("oom_kills", 0) > 0:
        return "oom"
    if cancelled_at is not None and exit.get("ended", 0) >= cancelled_at:
        return "cancelled"
    code = exit.get("exit_code")
    if code is None or exit.get("stopped_by_simrun") or code == EXIT_STORAGE:
        return "evicted"
    if code == retry_rule.KILLED_EXIT:
        return "killed"
    return "failed"


def _message(exit: dict[str, Any], result: Outcome) -> str:
    code = exit.get("exit_code")
    if exit.get("message"):
        return str(exit["message"])
    if result == "oom":
        return f"killed for memory: {exit.get('oom_kills')} kill(s) of the out of memory killer"
    if result == "killed":
        return (
            f"ended by SIGKILL (exit code {code}) with memory not enforced, maybe for memory: "
            "retried once with the retry memory"
        )
    if result == "cancelled":
        return f"stopped by the cancellation of its run (exit code {code})"
    if exit.get("signal"):
        name = signal.Signals(exit["signal"]).name
        return f"ended by {name} (exit code {code})"
    # The exit code is the attempt's own field; the message is the log's last line, as a
    # pod's termination message.
    return str(exit.get("last_line") or "")


def failed_attempt(attempt: Attempt, result: Outcome, host: str) -> FailedAttempt:
    """The record of an attempt that ended without success."""
    exit = attempt.exit or {}
    return FailedAttempt(
        attempt=attempt.number,
        exit_code=exit.get("exit_code"),
        oom_killed=result == "oom",
        evicted=result == "evicted",
        node=host,
        message=_message(exit, result),
        memory_gb=attempt.memory_gb or None,
        started_at=attempt.started,
    )


def retry(view: NodeView) -> str | None:
    """The phase of a node whose retry waits after its attempts, None when it gets none.

    As on the cluster: a kill for memory is retried (the next attempt has the retry memory,
    ``runs.backends.retry_rule``) unless it is the second proven kill and hit the retry memory
    (Ruling 35); a SIGKILL no cgroup explains, once; an eviction is retried; no more than
    ``RETRY_LIMIT`` retries in all, as Argo's limit. A failure or a cancellation ends the node.
    """
    last = view.outcomes[-1]
    if len(view.outcomes) > RETRY_LIMIT:
        return None
    if last == "killed":
        # No evidence of memory: one retry with the retry memory, never more.
        return RETRYING_PHASE if view.outcomes.count("killed") == 1 else None
    if last == "oom" and not retry_rule.fails_the_run(
        proven_kills=view.outcomes.count("oom"),
        is_retry=len(view.outcomes) > 1
        and retry_rule.gets_retry_memory(_exit_of(view, len(view.outcomes) - 2)),
    ):
        return RETRYING_PHASE
    if last == "evicted":
        return PREEMPTED_PHASE
    return None


def node_phase(view: NodeView, stopped: bool) -> str | None:
    """The Argo phase of a node with attempts; None for one that has none."""
    running = view.running
    if running is not None:
        return "Running" if running.began else "Pending"
    if not view.outcomes:
        return None
    if view.outcomes[-1] == "succeeded":
        return "Succeeded"
    waiting = retry(view)
    return waiting if waiting is not None and not stopped else "Failed"


def _exit_of(view: NodeView, number: int) -> int | None:
    """The exit code of an ended attempt as the retry rule reads it: 137 for a proven kill for
    memory, whatever the process's own code was (a pool whose child was killed exits 3)."""
    if view.outcomes[number] == "oom":
        return retry_rule.KILLED_EXIT
    exit = view.attempts[number].exit
    return None if exit is None else exit.get("exit_code")


def next_memory_gb(view: NodeView) -> float:
    """The memory of the next attempt: the retry memory right after an attempt that exited 137.

    The one rule of both backends (``runs.backends.retry_rule``): Argo's ``podSpecPatch`` sees only
    the attempt before, so an attempt gets the retry memory exactly when that one was killed.
    """
    return retry_rule.next_memory_gb(
        memory_gb=view.spec.memory_gb,
        retry_memory_gb=view.spec.retry_memory_gb,
        previous_exit=_exit_of(view, len(view.outcomes) - 1) if view.outcomes else None,
    )


@dataclass
class RunView:
    """A submitted run with the attempts of its nodes, read from the files."""

    submission: Submission
    stop: dict[str, Any] | None
    nodes: dict[str, NodeView]

    @property
    def stopped(self) -> bool:
        return self.stop is not None

    def running(self) -> list[tuple[NodeView, Attempt]]:
        return [(v, a) for v in self.nodes.values() if (a := v.running) is not None]

    def startable(self) -> list[NodeView]:
        """The nodes whose next attempt may start (cores permitting), in the order of the run.

        A node starts when the nodes it reads from succeeded, whatever other branches did: the
        Workflow's DAG has ``failFast: false`` and Argo goes on with independent branches, so
        the local backend does too and the controller decides the run on both alike (Ruling
        17b). A node whose attempt ended starts again when its retry waits; nothing of a
        stopped run.
        """
        if self.stopped:
            return []
        ready = []
        for view in self.nodes.values():
            if view.running is not None:
                continue
            if view.attempts:
                if view.outcomes[-1] != "succeeded" and retry(view) is not None:
                    ready.append(view)
            elif all(self.phase_of(n) == "Succeeded" for n in view.spec.after):
                ready.append(view)
        return ready

    def running_node(self, node: str) -> bool:
        return node not in self.nodes or self.nodes[node].running is not None

    def phase_of(self, node: str) -> str | None:
        return node_phase(self.nodes[node], self.stopped)

    def phases(self) -> dict[str, str]:
        """The phase of every node that exists: started, or ready and waiting for cores."""
        phases = {n: p for n, v in self.nodes.items() if (p := node_phase(v, self.stopped))}
        for view in self.startable():
            phases.setdefault(view.spec.name, "Pending")
        return phases

    def phase(self) -> str:
        """The phase of the workflow."""
        if all(self.phase_of(n) == "Succeeded" for n in self.nodes):
            return "Succeeded"
        if self.running() or self.startable():
            started = any(v.attempts for v in self.nodes.values())
            return "Running" if started else "Pending"
        return "Failed"

    def ended(self) -> bool:
        return self.phase() in {"Succeeded", "Failed"}


def status_of(view: RunView, waiting: dict[str, str], host: str) -> BackendStatus:
    """The status of a run as ``view`` shows it, with why its ready nodes wait."""
    failed: dict[str, list[FailedAttempt]] = {}
    hosts, started = {}, {}
    for node in view.nodes.values():
        if node.attempts:
            hosts[node.spec.name] = host
            if (start := node.attempts[-1].started) is not None:
                started[node.spec.name] = start
        for attempt, result in zip(node.attempts, node.outcomes, strict=False):
            if result != "succeeded":
                record = failed_attempt(attempt, result, host)
                record.ended_at = (attempt.exit or {}).get("ended")
                failed.setdefault(node.spec.worker, []).append(record)
    message = ""
    if view.stop is not None:
        strategy = "Terminate" if view.stop.get("how") == "cancel" else "Stop"
        message = f"Stopped with strategy '{strategy}'"
    return BackendStatus(
        phase=view.phase(),
        tasks=view.phases(),
        failed=failed,
        hosts=hosts,
        started=started,
        message=message,
        waiting={n: r for n, r in waiting.items() if not view.running_node(n)},
    )
