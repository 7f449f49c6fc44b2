"""The local backend: the pods of a run as processes on this machine (spec/004, design.md).

The nodes and phases of a run are the ones of its Argo workflow, so the controller decides
the states of its tasks as on a cluster. Unlike the spec's backend, no thread of a service
process owns a run, since Celery's processes come and go: the state of a run is files (its
submission under ``<store>/local/`` and the files of its processes beside their logs, see
``state``), any process reads a status from them, and a periodic ``step`` under a file
lock (``serve``'s step process, ``run_steps``) starts what the DAG and the machine's free cores
and memory allow (``admission``), as the run's task user (``user``), and notices
ends. Each process is started detached through ``launcher``, which records its
exit code and end time, so a run survives a restart of the service.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import untrusted
from harness.config import GRACE_S, STOP_MARGIN_S
from harness.report import report_path
from harness.tasktypes import TaskType
from runs.backends.base import (
    BackendStatus,
    ClusterConfig,
    FailedAttempt,
    KeptLogs,
    NodeInfo,
    Placement,
    PodLog,
    RunRecord,
    TaskPlan,
    TaskRecord,
    workflow_name,
)
from runs.backends.local import cgroups
from runs.backends.local import env as local_env
from runs.backends.local import shm as local_shm
from runs.backends.local import user as local_user
from runs.backends.local import wake as local_wake
from runs.backends.local.admission import Demand, Held, admit
from runs.backends.local.banner import describe
from runs.backends.local.budget import Budget, UserBudget
from runs.backends.local.launcher import (
    STARTING_EXIT,
    notify,
    process_start,
    read_json,
    same_process,
    write_json,
)
from runs.backends.local.state import (
    Attempt,
    NodeSpec,
    NodeView,
    Submission,
    failed_attempt,
    logs_parts,
    next_memory_gb,
    node_phase,
    outcome,
    read_attempts,
    read_service_json,
    retry,
)
from runs.common.store import TaskFolder

logger = logging.getLogger(__name__)

ENDED_KEPT = 64
"""The ended runs whose status the backend keeps, the latest; an older one is unknown."""
POLL_S = 0.5
"""Seconds between two steps when nothing wakes the step earlier."""
LOST_AFTER_S = 60.0
VERSIONS_STALE_S = 10 * POLL_S
"""Versions no step rewrote within this are no signal: no step runs, so none is current."""
"""A launch whose launcher never wrote its pid file within this is lost."""
LAUNCHER = Path(__file__).with_name("launcher.py")
PASSED_ENV = ("LANG", "LC_ALL", "TZ")
"""The only variables of the service's environment its processes get (besides SIMRUN_*)."""
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
PIDS_MAX = 4096
"""The processes (and threads) a task may have at once (``SIMRUN_TASK_PIDS_MAX``)."""
LOG_CAP = 64 << 20
"""The most of a log ``logs`` reads whole."""
BUDGET = Budget(files=100_000, bytes=20 << 30, depth=64, check_s=2.0)
"""What a task may keep in its folder and scratch (``SIMRUN_TASK_FILES_MAX``, ...)."""
USER_BUDGET = UserBudget(files=500_000, bytes=100 << 30)
"""What the running tasks of one user may hold together (``SIMRUN_USER_FILES_MAX``, ...)."""
LOG_BYTES = 64 << 20
"""The bytes of an attempt's log (``SIMRUN_TASK_LOG_MB``): its head and tail are kept."""


def physical_memory_gb() -> float:
    """The memory of this machine in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def node_name(task: TaskRecord) -> str:
    """The node of a task in the workflow: its coordinator for a split task."""
    return f"{task.id}-w0" if task.kind == "split" else task.id


def docker_problem() -> str | None:
    """Why no Docker engine can run a container here, None when one answers."""
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except FileNotFoundError:
        return "docker is not installed"
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 10 s"
    if done.returncode != 0:
        return (done.stderr or done.stdout).strip() or f"docker version exited {done.returncode}"
    return None


@dataclass(frozen=True)
class PackagesLimits:
    """The bounds of the installs of environments' packages (``SIMRUN_PACKAGES_*``)."""

    timeout_s: float = 1800.0
    kept: int = 8
    """The venvs of packages kept under the store, the least recently used removed beyond."""
    cache_gb: float = 5.0
    """The most a builder's wheel cache keeps; emptied after an install that left it larger."""


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


class LocalBackend:
    """A backend which runs the tasks of a run as processes on this machine."""

    name = "local"
    runs_images = False
    extra_workers = False
    reserves_nodes = False
    largest_node = "this machine"
    logs_in_store = True

    def __init__(
        self,
        store: Path,
        scratch: Path,
        commands: str = "direct",
        cores: int | None = None,
        memory_gb: float | None = None,
        envs: Path | None = None,
        *,
        enforce_memory: bool = True,
        grace_s: float = GRACE_S,
        task_uid_base: int | None = None,
        pids_max: int = PIDS_MAX,
        packages: PackagesLimits | None = None,
        task_network: str = "loopback",
        budget: Budget = BUDGET,
        log_bytes: int = LOG_BYTES,
        user_budget: UserBudget = USER_BUDGET,
    ) -> None:
        """Create the backend.

        ``enforce_memory=False`` never creates memory cgroups; ``grace_s`` is the time from
        the SIGTERM of a cancel to the SIGKILL (the harness's grace period by default);
        ``task_uid_base`` runs the processes of a user's runs as the user of that id plus the
        owner's (``user``, only as root), None as the service's own user; ``pids_max``
        is the most processes a task may have (its pids cgroup, else ``RLIMIT_NPROC`` of its
        task user); ``task_network`` ``loopback`` gives a task run as a task user a network of
        its own (``host``: the machine's); ``budget`` what a task may keep in its folder and
        scratch, ``log_bytes`` the bytes of each attempt's log, ``user_budget`` what the
        running tasks of one owner may keep together.
        """
        self.store = Path(store)
        self.scratch = Path(scratch)
        self.envs = Path(envs) if envs is not None else self.scratch.parent / "envs"
        self.commands = commands
        self.cores = cores or len(os.sched_getaffinity(0))
        self.memory_gb = memory_gb or physical_memory_gb()
        self.max_cores: int | None = self.cores
        self.max_memory_gb: float | None = self.memory_gb
        self.hostname = socket.gethostname()
        self.grace_s = grace_s
        self.task_uid_base = task_uid_base if os.geteuid() == 0 else None
        self.hierarchy = cgroups.detect() if enforce_memory else None
        self.enforces_memory = self.hierarchy is not None
        self.pids_max = pids_max
        self.packages = packages or PackagesLimits()
        self.task_network = task_network
        self.budget = budget
        self.log_bytes = log_bytes
        self.user_budget = user_budget
        self.pids_parent = cgroups.detect_pids() if os.geteuid() == 0 else None
        self.state = self.store / "local"
        self.address = local_wake.address_of(self.state)
        self._callbacks: list[Callable[[], None]] = []
        self._closed = False
        self._ends_seen: set[Path] = set()
        self._began_seen: set[Path] = set()
        self._launchers: list[subprocess.Popen[bytes]] = []

    @classmethod
    def from_settings(cls) -> LocalBackend:
        """The backend of the Django settings (``SIMRUN_STORE``, ``SIMRUN_LOCAL_*``)."""
        from django.conf import settings

        return cls(
            store=settings.SIMRUN_STORE,
            scratch=settings.SIMRUN_SCRATCH,
            commands=settings.SIMRUN_LOCAL_COMMANDS,
            cores=settings.SIMRUN_LOCAL_CORES,
            memory_gb=settings.SIMRUN_LOCAL_MEMORY_GB,
            task_uid_base=settings.SIMRUN_TASK_UID_BASE,
            pids_max=settings.SIMRUN_TASK_PIDS_MAX,
            packages=PackagesLimits(
                timeout_s=settings.SIMRUN_PACKAGES_TIMEOUT_S,
                kept=settings.SIMRUN_ENVIRONMENTS_KEPT,
                cache_gb=settings.SIMRUN_PACKAGES_CACHE_GB,
            ),
            task_network=settings.SIMRUN_TASK_NETWORK,
            budget=Budget(
                files=settings.SIMRUN_TASK_FILES_MAX,
                bytes=int(settings.SIMRUN_TASK_DISK_GB * 2**30),
                depth=settings.SIMRUN_TASK_DEPTH_MAX,
                check_s=settings.SIMRUN_TASK_FILES_CHECK_S,
            ),
            log_bytes=int(settings.SIMRUN_TASK_LOG_MB * 2**20),
            user_budget=UserBudget(
                files=settings.SIMRUN_USER_FILES_MAX,
                bytes=int(settings.SIMRUN_USER_DISK_GB * 2**30),
            ),
        )

    # The files of the backend.

    def _submission_file(self, name: str) -> Path:
        return self.state / "runs" / f"{name}.json"

    def _stop_file(self, name: str) -> Path:
        return self.state / "runs" / f"{name}.stop"

    def _waiting_file(self) -> Path:
        return self.state / "waiting.json"

    def _ended_file(self, name: str) -> Path:
        return self.state / "ended" / name

    def _make_state(self) -> None:
        """The backend's folder: every run's commands, the service's alone (its group reads)."""
        self.state.mkdir(mode=0o750, parents=True, exist_ok=True)
        if self.state.stat().st_mode & 0o007:
            self.state.chmod(0o750)

    def _submission(self, name: str) -> Submission:
        try:
            return Submission.model_validate_json(self._submission_file(name).read_text())
        except FileNotFoundError:
            raise KeyError(name) from None

    def _is_live(self, name: str) -> bool:
        """Whether a run is known and has not ended."""
        return self._submission_file(name).exists() and not self._ended_file(name).exists()

    def _live(self) -> list[Submission]:
        """The submissions of the runs that have not ended, in the order of their submission."""
        found = []
        for path in (self.state / "runs").glob("*.json"):
            if self._is_live(path.stem):
                try:
                    found.append(Submission.model_validate_json(path.read_text()))
                except (OSError, ValueError):
                    continue  # removed meanwhile, as ENDED_KEPT forgets a run
        return sorted(found, key=lambda s: (s.order, s.name))

    def _view(self, submission: Submission) -> RunView:
        stop = read_json(self._stop_file(submission.name))
        cancelled_at = stop["at"] if stop else None
        tasks: dict[str, list[NodeSpec]] = {}
        for spec in submission.nodes:
            tasks.setdefault(spec.task, []).append(spec)
        nodes: dict[str, NodeView] = {}
        for task, specs in tasks.items():
            names = [s.name for s in specs]
            attempts = read_attempts(submission.store, submission.run, task, names)
            for spec in specs:
                found = attempts[spec.name]
                results = [outcome(a.exit, cancelled_at) for a in found if a.exit is not None]
                nodes[spec.name] = NodeView(spec, found, results)
        return RunView(submission, stop, nodes)

    # Submission.

    def submit(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str:
        """Keep the run for the step, which starts its processes; a run submitted before is kept.

        ValueError when a task reads from a task the run does not have, has a type that is
        unknown or neither splittable nor has a command, or runs in an image and no Docker
        engine answers; RuntimeError when the backend is closed.
        """
        if self._closed:
            raise RuntimeError("the local backend is closed")
        name = workflow_name(record.id)
        path = self._submission_file(name)
        if path.exists():
            return name
        order = time.time() if record.created_at is None else record.created_at
        owner = record.owner
        submission = Submission(
            name=name,
            run=record.id,
            order=order,
            owner=owner,
            store=record.store,
            nodes=self._nodes(record, plans, types),
            snapshots=[str(record.store / "snapshots" / digest) for digest in record.sources],
            packages=record.packages,
        )
        self._make_state()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, submission.model_dump(mode="json"))
        notify(self.address)
        return name

    def _nodes(
        self, record: RunRecord, plans: dict[str, TaskPlan], types: dict[str, TaskType]
    ) -> list[NodeSpec]:
        commands = record.local_commands or self.commands
        in_docker = [
            t for t in record.tasks.values() if t.kind == "command" and commands == "docker"
        ]
        if in_docker and (problem := docker_problem()):
            raise ValueError(f"commands: docker, but no Docker engine can run them: {problem}")
        return [
            self._node(record, task, plans[task.id], types, commands)
            for task in record.tasks.values()
            if task.id not in record.reused
        ]

    def _node(
        self,
        record: RunRecord,
        task: TaskRecord,
        plan: TaskPlan,
        types: dict[str, TaskType],
        commands: str,
    ) -> NodeSpec:
        for port, source in task.inputs.items():
            if source not in record.tasks:
                raise ValueError(
                    f"task {task.id}: input {port} reads {source!r}, no task of the run"
                )
        inputs = {
            port: f"runs/{record.id}/tasks/{source}/out" for port, source in task.inputs.items()
        }
        name = node_name(task)
        env = {
            "SIMRUN_TASK_DIR": str(record.task_dir(task.id)),
            "SIMRUN_STORE": str(record.store),
            "SIMRUN_INPUTS": ",".join(f"{port}={path}" for port, path in inputs.items()),
            "SIMRUN_CORES": str(plan.cores),
            "SIMRUN_WORKER": name if task.kind == "split" else task.id,
        }
        argv: list[str] = []
        command: list[str] = []
        image = ""
        stage: list[tuple[str, str]] = []
        if task.kind in {"split", "plugin"}:
            task_type = types.get(task.type)
            if task_type is None:
                raise ValueError(f"task {task.id}: unknown task type {task.type!r}")
            if task.kind == "split":
                if not task_type.splittable:
                    raise ValueError(f"task {task.id}: task type {task.type!r} is not splittable")
                argv = ["simrun-worker"]
                env["SIMRUN_ROLE"] = "base"
            elif task_type.command is None:
                raise ValueError(f"task {task.id}: task type {task.type!r} has no command")
            else:
                argv = ["simrun-exec", *task_type.command(task_type.parse_settings(task.settings))]
        else:
            if not task.command:
                raise ValueError(f"task {task.id}: a command task needs a command")
            env["SIMRUN_OUT"] = str(record.task_dir(task.id) / "out")
            stage = [(path, f"inputs/{port}") for port, path in inputs.items()]
            if commands == "docker":
                image = task.image or record.image
                if not image:
                    raise ValueError(f"task {task.id}: commands: docker needs an image")
                command = list(task.command)
            else:
                argv = list(task.command)
        return NodeSpec(
            name=name,
            task=task.id,
            worker=env["SIMRUN_WORKER"],
            kind=task.kind,
            after=[
                node_name(record.tasks[source])
                for source in task.inputs.values()
                if source not in record.reused
            ],
            argv=argv,
            command=command,
            image=image,
            env=env,
            stage=stage,
            cores=plan.cores,
            memory_gb=plan.memory_gb,
            retry_memory_gb=plan.retry_memory_gb,
        )

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every launch, start and end of a process that a step
        noticed."""
        self._callbacks.append(callback)

    def versions(self, names: list[str]) -> dict[str, str]:
        """A digest of the status of each named live run as the last step read it
        (``ChangeSignal``): one file read for all; empty while no step rewrote it lately."""
        path = self.state / "versions.json"
        try:
            if time.time() - path.stat().st_mtime > VERSIONS_STALE_S:
                return {}
        except OSError:
            return {}
        known = read_json(path) or {}
        return {name: known[name] for name in names if name in known}

    def _write_versions(self, views: list[RunView]) -> None:
        """Write the digest of the status of every live run, at every step (``versions``),
        from the views the step read (no run's files are read again)."""
        waiting = read_json(self._waiting_file()) or {}
        found = {}
        for view in views:
            name = view.submission.name
            text = self._status_of(view, waiting.get(name, {})).model_dump_json()
            found[name] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        write_json(self.state / "versions.json", found)

    # The step.

    @contextlib.contextmanager
    def _lock(self, blocking: bool) -> Iterator[bool]:
        """The lock of the step (a file lock: any process of the service may step)."""
        self._make_state()
        with open(self.state / "step.lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True

    def step(self) -> bool:
        """Start what may start, notice what began and ended; whether a process was
        launched, began (its pid file names it) or ended.

        Another process stepping at the same time makes this one return False at once.
        """
        with self._lock(blocking=False) as locked:
            changed = locked and self._step()
        if changed:
            for callback in self._callbacks:
                try:
                    callback()
                except Exception:  # a subscriber's failure is no failure of the step
                    logger.exception("a subscriber of the local backend failed")
        return changed

    def _step(self) -> bool:
        now = time.time()
        self._launchers = [p for p in self._launchers if p.poll() is None]
        views = []
        for view in map(self._view, self._live()):
            if self._reap_lost(view, now):
                view = self._view(view.submission)
            if view.stop is not None and now - view.stop["at"] >= self.grace_s:
                for _, attempt in view.running():
                    signal_process(attempt.pid or {}, signal.SIGKILL)
            views.append(view)
        started = self._admit(views, now)
        for view in views:
            if view.ended():
                self._end(view.submission.name, view.submission.run)
        ends = {
            a.path("exit") for v in views for n in v.nodes.values() for a in n.attempts if a.ended
        }
        ended = bool(ends - self._ends_seen)
        self._ends_seen = ends
        # A process runs from the moment its launcher named it (its pid file), not from its
        # launch: subscribers hear of that too, so a task shows running while it prints.
        began = {
            a.path("pid") for v in views for n in v.nodes.values() for a in n.attempts if a.began
        }
        began_now = bool(began - self._began_seen)
        self._began_seen = began
        # What the step started is in its runs' files, not yet in the views it read first.
        self._write_versions([self._view(v.submission) for v in views] if started else views)
        return started or ended or began_now

    def _admit(self, views: list[RunView], now: float) -> bool:
        """Start what the machine's free cores and memory allow (``admission``), refuse
        what it can never hold, and keep why the others wait; whether anything started."""
        ready: dict[Demand, tuple[RunView, NodeView]] = {}
        for view in views:
            for node in view.startable():
                demand = Demand(
                    view.submission.run,
                    node.spec.name,
                    node.spec.cores,
                    next_memory_gb(node),
                    view.submission.owner,
                )
                ready[demand] = (view, node)
        held = [
            Held(view.submission.run, attempt.cores, attempt.memory_gb, view.submission.owner)
            for view in views
            for _, attempt in view.running()
        ]
        last_start: dict[int | None, float] = {}
        for view in views:
            for node in view.nodes.values():
                for attempt in node.attempts:
                    if (started := attempt.started) is not None:
                        owner = view.submission.owner
                        last_start[owner] = max(started, last_start.get(owner, started))
        found = admit(list(ready), held, self.cores, self.memory_gb, last_start)
        for demand in found.start:
            view, node = ready[demand]
            # Sources and packages are built as the task user, by this Python.
            built = view.submission.snapshots or view.submission.packages
            kind = "split" if built else node.spec.kind
            if problem := self.isolation_problem(view.submission.owner, kind):
                self._refuse(view.submission, node, problem, now)
            else:
                self._start(view.submission, node)
        for demand, reason in found.refused.items():
            view, node = ready[demand]
            self._refuse(view.submission, node, reason, now)
        waiting: dict[str, dict[str, str]] = {}
        for demand, reason in found.waiting.items():
            name = ready[demand][0].submission.name
            waiting.setdefault(name, {})[demand.node] = reason
        if read_json(self._waiting_file()) != waiting:
            write_json(self._waiting_file(), waiting)
        return bool(found.start or found.refused)

    def _refuse(self, submission: Submission, node: NodeView, reason: str, now: float) -> None:
        """End a node that can never start here as an attempt that failed, saying why."""
        stem = f"{node.spec.name}-{len(node.attempts)}"
        message = f"not started: {reason}"
        logs = self._logs_dir(submission, node.spec.task)
        try:
            log = untrusted.open_own(logs, f"{stem}.log")
            with os.fdopen(log, "a") as handle:
                handle.write(f"simrun: {message}\n")
            launch = {"started": now, "cores": 0, "memory_gb": 0}
            untrusted.write_atomic_at(logs, f"{stem}.launch", json.dumps(launch))
            end = {"exit_code": STARTING_EXIT, "signal": None, "ended": now, "message": message}
            untrusted.write_atomic_at(logs, f"{stem}.exit", json.dumps(end))
        finally:
            os.close(logs)

    def _logs_dir(self, submission: Submission, task: str) -> int:
        """The ``logs/`` folder of a task, the service's own (a folder a task planted there is
        moved aside), walked from the store without links: a descriptor the caller closes.
        The task's folder and its ``out/`` are made if missing, as the service's."""
        task_fd = untrusted.make_dirs(submission.store, ["runs", submission.run, "tasks", task])
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir("out", 0o755, dir_fd=task_fd)
            return untrusted.service_dir(task_fd, "logs")
        finally:
            os.close(task_fd)

    def _reap_lost(self, view: RunView, now: float) -> bool:
        """Record the end of attempts whose launcher died without recording it."""
        lost = False
        for _, attempt in view.running():
            names = attempt.pid
            if names is None:
                if now - attempt.launch["started"] < LOST_AFTER_S:  # type: ignore[index]
                    continue
            elif launcher_alive(names) or process_alive(names):
                continue
            logs = self._logs_dir(view.submission, view.nodes[attempt.node].spec.task)
            try:
                if read_service_json(logs, attempt.path("exit").name) is not None:
                    continue  # the launcher recorded the end after all
                kills = 0
                launch = attempt.launch or {}
                if cgroup := launch.get("cgroup"):
                    kills = cgroups.oom_kills(Path(cgroup))
                    cgroups.remove(Path(cgroup))
                if pids_cgroup := launch.get("pids_cgroup"):
                    cgroups.remove(Path(pids_cgroup))
                end = {
                    "exit_code": None,
                    "signal": None,
                    "oom_kills": kills,
                    "ended": now,
                    "message": "lost: its launcher ended without recording the end of the process",
                }
                untrusted.write_atomic_at(logs, attempt.path("exit").name, json.dumps(end))
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(attempt.path("pid").name, dir_fd=logs)
            finally:
                os.close(logs)
            lost = True
        return lost

    def _start(self, submission: Submission, node: NodeView) -> None:
        """Start the next attempt of a node through the launcher."""
        spec, number = node.spec, len(node.attempts)
        memory_gb = next_memory_gb(node)
        task_dir = submission.task_dir(spec.task)
        stem = f"{spec.name}-{number}"
        logs = self._logs_dir(submission, spec.task)
        try:
            self._launch(submission, node, memory_gb, task_dir, stem, logs)
        finally:
            os.close(logs)

    def _launch(
        self,
        submission: Submission,
        node: NodeView,
        memory_gb: float,
        task_dir: Path,
        stem: str,
        logs: int,
    ) -> None:
        """Write the launch file of an attempt in its ``logs/`` folder (``logs``, a descriptor)
        and start its launcher, which inherits the launch file and the folder."""
        spec, number = node.spec, len(node.attempts)
        scratch = self.scratch / submission.run / stem
        user = self._isolate(submission, logs)
        cgroup = None
        pids_cgroup = None
        name = f"{submission.run}.{spec.name}.{number}"
        if self.hierarchy is not None and not spec.image:
            cgroup = cgroups.create(self.hierarchy, name, math.ceil(memory_gb * 2**30))
        if self.pids_parent is not None and not spec.image:
            pids_cgroup = cgroups.create_pids(self.pids_parent, name, self.pids_max)
        packages = self._packages(submission, user) if not spec.image else None
        venv = self.envs / submission.run if submission.snapshots else None
        base = Path(packages["dir"]) if packages else None
        env = {
            **task_env(venv or base, scratch, user),
            **spec.env,
            "SIMRUN_ATTEMPT": str(number),
            "SIMRUN_SCRATCH": str(scratch),
            "SIMRUN_MEMORY_LIMIT_GB": f"{memory_gb:g}",
            "SIMRUN_MEMORY_SOURCE": "cgroup" if cgroup is not None else "process",
            # What running units get after a SIGTERM, so the process ends before the SIGKILL.
            "SIMRUN_GRACE_S": f"{self.grace_s - min(STOP_MARGIN_S, self.grace_s / 2):g}",
        }
        container = f"simrun-{submission.run}-{spec.name}-{number}" if spec.image else None
        argv = spec.argv
        if container is not None:
            argv = docker_argv(spec, container, memory_gb, env, scratch, submission.store, user)
        report = report_path(task_dir, spec.worker, number).relative_to(submission.store)
        launch = {
            "name": stem,
            "argv": argv,
            "env": env,
            "cwd": str(scratch),
            "store": str(submission.store),
            "stage": spec.stage,
            "cgroup": str(cgroup) if cgroup is not None else None,
            "pids_cgroup": str(pids_cgroup) if pids_cgroup is not None else None,
            "pids_max": self.pids_max,
            "task": task_dir.relative_to(submission.store).as_posix(),
            "budget": self.budget.to_json(),
            "user_budget": self._user_budget(submission, name),
            "log_bytes": self.log_bytes,
            # A /dev/shm of its own as large as its memory (a container has its own).
            "shm": {"bytes": math.ceil(memory_gb * 2**30), "inodes": self.budget.files}
            if container is None and local_shm.usable(submission.store, self.scratch)
            else None,
            "network": self.task_network,
            "venv": {"dir": str(venv), "snapshots": submission.snapshots, "base": str(base or "")}
            if venv
            else None,
            "packages": packages,
            "container": container,
            "notify": self.address,
            "cores": spec.cores,
            "memory_gb": memory_gb,
            # When it was launched, not when this step began: an end recorded meanwhile
            # (the one that freed its cores) comes before it.
            "started": time.time(),
            # A plain command writes no report: the launcher writes its measured peak.
            "report": report.as_posix() if spec.kind == "command" and container is None else None,
            # Nor its live memory: the launcher samples it (``<stem>.live.json`` in logs/).
            "live": spec.kind == "command" and container is None,
            # docker runs as the service (its socket is root's); the container as the user.
            "user": None
            if user is None or container is not None
            else {"uid": user.uid, "gid": user.gid, "umask": local_user.UMASK},
            "stage_user": None
            if user is None
            else {"uid": user.uid, "gid": user.gid, "umask": local_user.UMASK},
        }
        # The service's group reads it, never a task (``logs/`` is the service's).
        untrusted.write_atomic_at(logs, f"{stem}.launch", json.dumps(launch), mode=0o640)
        log = untrusted.open_own(logs, f"{stem}.log")
        launch_fd = os.open(f"{stem}.launch", untrusted.FILE_FLAGS, dir_fd=logs)
        try:
            self._launchers.append(
                subprocess.Popen(
                    # No path nor run id on the command line (``ps`` shows it to every user):
                    # the launch file and the logs folder are inherited descriptors.
                    [sys.executable, str(LAUNCHER), str(launch_fd), str(logs)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=launcher_env(),
                    pass_fds=(launch_fd, logs),
                )
            )
        finally:
            os.close(launch_fd)
            os.close(log)

    def _packages(
        self, submission: Submission, user: local_user.TaskUser | None
    ) -> dict[str, Any] | None:
        """What the launcher needs to install the packages of a run's environment (or find
        them installed): None for a run without packages."""
        if not submission.packages:
            return None
        install = local_env.Install(
            store=submission.store,
            packages=tuple(submission.packages),
            timeout_s=self.packages.timeout_s,
            uid=user.uid if user else None,
            gid=user.gid if user else None,
        )
        return {
            "dir": str(install.directory),
            "store": str(submission.store),
            "packages": submission.packages,
            "timeout_s": self.packages.timeout_s,
            "kept": self.packages.kept,
            "cache_gb": self.packages.cache_gb,
            # Where the service's pip finds packages (an index, a mirror): in the launch
            # file, which only the service's group reads, not on a command line.
            "pip_env": local_env.pip_env(),
        }

    def isolation_problem(self, owner: int | None = 0, kind: str = "split") -> str | None:
        """Why the processes of an owner's runs cannot run as their task user, None if they
        can (or run as the service's user). A command needs the store and scratch; a split
        or plugin task, or any task of a run with sources (their venv is built as the task
        user), the service's interpreter too."""
        if local_user.for_owner(owner, self.task_uid_base) is None:
            return None
        roots = [self.store, self.scratch, self.envs]
        if kind != "command":
            roots.append(Path(sys.executable).resolve())
        return local_user.unreachable(*roots)

    def hand_over(self, dir_fd: int, owner: int | None) -> None:
        """Give a folder the service made in a run's task folder (a descriptor) to the task
        user of ``owner``'s runs, so that its tasks write there; nothing when tasks run as
        the service's user."""
        user = local_user.for_owner(owner, self.task_uid_base)
        if user is not None:
            local_user.give(dir_fd, user, depth=0)

    def _user_budget(self, submission: Submission, name: str) -> dict[str, Any] | None:
        """The budget of the running tasks of the run's owner for a launch: the budget, the
        owner's ledger (``<state>/usage/<owner>/``, the service's, made if missing) and the
        attempt's entry there; None for a run without an owner."""
        if submission.owner is None:
            return None
        ledger = ["usage", str(submission.owner)]
        os.close(untrusted.service_dir(self.state, ledger[:1]))
        os.close(untrusted.service_dir(self.state, ledger))
        return {
            **self.user_budget.to_json(),
            "ledger": str(self.state.joinpath(*ledger)),
            "entry": name,
        }

    def _isolate(self, submission: Submission, logs: int) -> local_user.TaskUser | None:
        """The task user of a run's processes, with the run's directory handed to it and the
        roots it crosses made passable; None when processes run as the service's user."""
        user = local_user.for_owner(submission.owner, self.task_uid_base)
        if user is None:
            return None
        store_runs = submission.store / "runs"
        snapshots = submission.store / "snapshots"
        local_user.pass_only(submission.store, store_runs, snapshots, self.scratch, self.envs)
        if submission.packages:
            local_user.pass_only(submission.store / local_env.ENVIRONMENTS)
        local_user.pass_only(self.scratch / submission.run)
        with untrusted.directory(store_runs, [submission.run]) as run:
            local_user.give(run, user, skip=frozenset({"logs"}))
        local_user.keep(logs, user)
        return user

    def _end(self, name: str, run: str) -> None:
        """Remember that a run ended, forgetting the oldest beyond ``ENDED_KEPT``; its venv and
        scratch go."""
        self._ended_file(name).parent.mkdir(parents=True, exist_ok=True)
        self._ended_file(name).touch()
        self._forget_ended()
        local_env.remove(self.envs / run)
        untrusted.remove_tree(self.scratch, [run])  # however deep its tasks made it

    def _forget_ended(self) -> None:
        """Forget the ended runs beyond the latest ``ENDED_KEPT``."""
        try:
            ended = sorted((self.state / "ended").iterdir(), key=lambda p: p.stat().st_mtime)
        except FileNotFoundError:
            return
        for marker in ended[: max(0, len(ended) - ENDED_KEPT)]:
            self._submission_file(marker.name).unlink(missing_ok=True)
            self._stop_file(marker.name).unlink(missing_ok=True)
            marker.unlink(missing_ok=True)

    def run_steps(self, stop: threading.Event, poll_s: float = POLL_S) -> None:
        """Step until ``stop`` is set: at once when woken (a submission, an end), else every poll_s.

        First kills the processes that a service before left for ended or unknown runs.
        """
        self.kill_orphans()
        self._make_state()
        wake = local_wake.listen(self.address)  # None: another service steps this store, polls
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:  # one bad step (a full disk, a callback) must not end the loop
                    logger.exception("the step of the local backend failed")
                local_wake.wait(wake, poll_s)
        finally:
            local_wake.close(wake, self.address)

    # Status and control.

    def status(self, name: str) -> BackendStatus:
        """The phases of the nodes of a run; KeyError for an unknown run."""
        waiting = (read_json(self._waiting_file()) or {}).get(name, {})
        return self._status_of(self._view(self._submission(name)), waiting)

    def _status_of(self, view: RunView, waiting: dict[str, str]) -> BackendStatus:
        """The status of a run as ``view`` shows it, with why its ready nodes wait."""
        failed: dict[str, list[FailedAttempt]] = {}
        hosts, started = {}, {}
        for node in view.nodes.values():
            if node.attempts:
                hosts[node.spec.name] = self.hostname
                if (start := node.attempts[-1].started) is not None:
                    started[node.spec.name] = start
            for attempt, result in zip(node.attempts, node.outcomes, strict=False):
                if result != "succeeded":
                    record = failed_attempt(attempt, result, self.hostname)
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

    def cancel(self, name: str) -> None:
        """End a run: SIGTERM to its processes, SIGKILL after the grace; KeyError if unknown.

        No process of the run starts or is retried any more.
        """
        self._halt(name, "cancel")

    def stop(self, name: str) -> None:
        """End a run whose state is decided, as ``cancel``."""
        self._halt(name, "stop")

    def _halt(self, name: str, how: str) -> None:
        submission = self._submission(name)
        if not self._stop_file(name).exists():
            write_json(self._stop_file(name), {"at": time.time(), "how": how})
        for _, attempt in self._view(submission).running():
            signal_process(attempt.pid or {}, signal.SIGTERM)
        notify(self.address)

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        """The logs of the processes of a task, oldest first; KeyError for an unknown run."""
        view = self._view(self._submission(name))
        attempts = [a for n in view.nodes.values() if n.spec.task == task_id for a in n.attempts]
        attempts.sort(key=lambda a: a.launch["started"])  # type: ignore[index]
        if not attempts:
            return []
        try:
            logs = untrusted.own_dir(
                view.submission.store, logs_parts(view.submission.run, task_id)
            )
        except OSError:
            return []
        try:
            return [
                PodLog(
                    node=f"{a.node}({a.number})",
                    pod=f"{a.node}-{a.number}",
                    text=tail(logs, a.path("log").name, tail_lines),
                    done=a.ended,
                    attempt=a.number,
                )
                for a in attempts
            ]
        finally:
            os.close(logs)

    def keep_logs(self, name: str, task_id: str, folder: TaskFolder) -> KeptLogs:
        """Each launcher wrote its attempt's log into the store as it ran: nothing to copy;
        complete once every attempt of the task ended."""
        view = self._view(self._submission(name))
        ended = [a.ended for n in view.nodes.values() if n.spec.task == task_id for a in n.attempts]
        return KeptLogs(complete=all(ended))

    def describe(self) -> list[str]:
        return describe(self)

    def choose_node(self, plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()) -> str:
        raise LookupError("the local backend has no nodes to reserve: this machine is one")

    def nodes(self) -> list[NodeInfo]:
        """This machine."""
        return [NodeInfo(name=self.hostname, cores=self.cores, memory_gb=self.memory_gb)]

    def placements(self) -> list[Placement]:
        """A placement per running process."""
        return [
            Placement(
                workflow=view.submission.name,
                dag_task=node.spec.name,
                pod=f"{attempt.node}-{attempt.number}",
                node=self.hostname,
                phase="Running" if attempt.began else "Pending",
                cores=attempt.cores,
                memory_gb=attempt.memory_gb,
                worker=node.spec.worker,
                attempt=attempt.number,
            )
            for view in map(self._view, self._live())
            for node, attempt in view.running()
        ]

    def reserve(self, node: str, run_id: str) -> None:
        """Refused: there is nothing to reserve locally."""
        raise ValueError("the local backend has no nodes to reserve: submit without reserve_node")

    def unreserve(self, node: str, run_id: str) -> None:
        """Refused: there is nothing to reserve locally."""
        raise ValueError("the local backend has no nodes to reserve")

    def build_image(self, context: Path, ref: str) -> None:
        """Refused: the local backend runs no images of runs."""
        raise ValueError("the local backend builds no images")

    def has_image(self, ref: str) -> bool:
        """True: the local backend needs no image."""
        return True

    def close(self) -> None:
        """Refuse new runs. The processes of the runs go on: the next service adopts them."""
        self._closed = True

    def kill_orphans(self) -> int:
        """Kill the processes of ended or unknown runs which a service before left running.

        A process group is killed (and its container) only while its leader is still the
        process of the pid file: the same start time and command line, so a reused pid is never
        killed. The pid files are removed; so are the empty cgroups of ended processes.
        Returns the process groups killed.
        """
        killed = 0
        with self._lock(blocking=True):
            ours = set()
            for run in untrusted.list_dir(self.store, ["runs"]):
                if not run.is_dir or self._is_live(workflow_name(run.name)):
                    continue  # its processes are adopted
                ours.add(run.name)
                for task in untrusted.list_dir(self.store, ["runs", run.name, "tasks"]):
                    killed += self._kill_left(run.name, task.name)
            parents = [self.pids_parent]
            if self.hierarchy is not None:
                parents.append(self.hierarchy.parent)
            for parent in parents:
                if parent is None or not parent.is_dir():
                    continue
                # The parent is the machine's, shared by every service on it: only the cgroups
                # of this store's ended runs go, never another service's (made by its step, not
                # yet joined by its launcher: empty, so removing it failed that launch).
                for cgroup in parent.iterdir():  # named <run>.<node>.<attempt>
                    run_id = cgroup.name.partition(".")[0]
                    if run_id in ours and cgroup.is_dir() and not cgroups.pids(cgroup):
                        cgroups.remove(cgroup, timeout_s=0)
        return killed

    def _kill_left(self, run: str, task: str) -> int:
        """Kill what the pid files of a task's ``logs/`` name, and remove them; only the
        service's own files of the service's own folder count, walked without links."""
        try:
            logs = untrusted.own_dir(self.store, logs_parts(run, task))
        except OSError:
            return 0
        killed = 0
        try:
            for entry in untrusted.entries(logs):
                if not entry.name.endswith(".pid") or not entry.is_file:
                    continue
                names = read_service_json(logs, entry.name)
                if names is None:
                    continue  # not the service's
                killed += signal_process(names, signal.SIGKILL)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=logs)
        finally:
            os.close(logs)
        return killed


def launcher_alive(names: dict[str, Any]) -> bool:
    """Whether the launcher of a pid file still runs: the same pid, start time, command line."""
    pid = names.get("launcher")
    return pid is not None and same_process(
        pid, names.get("launcher_start"), names.get("launcher_cmdline")
    )


def process_alive(names: dict[str, Any]) -> bool:
    """Whether the process of a pid file still runs: the same pid, start time and command line.

    A process whose launcher still runs needs only its start time (a pid is not reused before
    the launcher reaped it, and the process may have replaced its command line with an exec).
    """
    pid = names.get("pid")
    if pid is None:
        return False
    if launcher_alive(names):
        start = names.get("start")
        return start is not None and process_start(pid) == start
    return same_process(pid, names.get("start"), names.get("cmdline"))


def signal_process(names: dict[str, Any], signum: int) -> bool:
    """Signal the process of a pid file with its descendants (and its container); whether one
    was.

    A SIGTERM goes to the launcher, which passes it to every descendant of the process (a
    ``setsid`` child too) and records that simrun sent it; a SIGKILL to the process's group,
    after which the launcher kills what is left. An attempt whose launcher has not started its
    process yet: a SIGTERM keeps the launcher from starting it, a SIGKILL kills its group.
    """
    if container := names.get("container"):
        kill = ["docker", "kill", "--signal", signal.Signals(signum).name, container]
        subprocess.run(kill, capture_output=True, timeout=30, check=False)
    if signum == signal.SIGTERM and launcher_alive(names):
        os.kill(names["launcher"], signum)
        return True
    if "pid" in names:
        if not process_alive(names):
            return False
        os.killpg(names["pid"], signum)
        return True
    if launcher_alive(names):
        if signum == signal.SIGTERM:
            os.kill(names["launcher"], signum)
        else:
            os.killpg(names["launcher"], signum)
        return True
    return False


def task_env(venv: Path | None, scratch: Path, user: local_user.TaskUser | None) -> dict[str, str]:
    """The environment of a process besides its ``SIMRUN_*``: the service's PATH after the
    run's venv or the service's interpreter (for ``python`` and ``simrun-*``), its scratch as
    home and temporary directory, the language; nothing else of the service's environment."""
    bins = [str(venv / "bin")] if venv is not None else []
    bins.append(str(Path(sys.executable).parent))
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    env |= {
        "PATH": os.pathsep.join([*bins, os.environ.get("PATH", BASE_PATH)]),
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "PYTHONUNBUFFERED": "1",
    }
    if user is not None:
        env["USER"] = env["LOGNAME"] = user.name
    return env


def launcher_env() -> dict[str, str]:
    """The launcher's environment: enough to run Python, none of the service's configuration
    (a process running as the service's own user could read it from /proc)."""
    env = {k: os.environ[k] for k in (*PASSED_ENV, "PATH") if k in os.environ}
    return env | {"PYTHONUNBUFFERED": "1"}


def docker_argv(
    spec: NodeSpec,
    container: str,
    memory_gb: float,
    env: dict[str, str],
    scratch: Path,
    store: Path,
    user: local_user.TaskUser | None = None,
) -> list[str]:
    """``docker run`` of a command in its image, with the store and its scratch mounted (as
    the run's task user when there is one)."""
    memory = f"{int(memory_gb * 2**30)}b"
    argv = ["docker", "run", "--name", container, "--memory", memory, "--memory-swap", memory]
    if user is not None:
        argv += ["--user", f"{user.uid}:{user.gid}"]
    argv += ["--cpus", str(spec.cores), "--volume", f"{store}:{store}"]
    argv += ["--volume", f"{scratch}:{scratch}", "--workdir", str(scratch)]
    for key, value in sorted(env.items()):
        if key.startswith("SIMRUN_"):
            argv += ["--env", f"{key}={value}"]
    return [*argv, spec.image, *spec.command]


def tail(logs: int, name: str, lines: int | None) -> str:
    """The text of a log of the service's ``logs/`` folder (a descriptor), or its last lines;
    empty when it is missing or not a regular file."""
    try:
        with untrusted.open_regular(logs, name) as handle:
            if lines is None:
                return handle.read(LOG_CAP).decode(errors="replace")
            handle.seek(0, os.SEEK_END)
            end = position = handle.tell()
            chunk = b""
            while position > 0 and chunk.count(b"\n") <= lines:
                position = max(0, position - 65536)
                handle.seek(position)
                chunk = handle.read(end - position)
    except OSError:
        return ""
    text = chunk.decode(errors="replace")
    kept = text.splitlines(keepends=True)[-lines:] if lines > 0 else []
    return "".join(kept)
