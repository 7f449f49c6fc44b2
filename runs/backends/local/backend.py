"""The local backend: the pods of a run as processes on this machine (docs/architecture.md).

The nodes and phases of a run are the ones of its Argo workflow (``nodes``), so the controller
decides the states of its tasks as on a cluster. Unlike the spec's backend, no thread of a
service process owns a run, since Celery's processes come and go: the state of a run is files
(its submission under ``<store>/local/``, ``submissions``, and the files of its processes
beside their logs, ``state``), any process reads a status from them, and a periodic step under
a file lock (``step``: ``serve``'s step process, ``run_steps``) starts what the DAG and the
machine's free cores and memory allow (``admission``), as the run's task user (``user``), and
notices ends. Each process is started detached through ``launcher`` (``launch``), which
records its exit code and end time, so a run survives a restart of the service; its logs are
in the store as it runs (``logs``), and its process is found and signalled from its pid file
(``processes``). This class holds the backend's configuration and answers the protocol.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.config import GRACE_S
from harness.tasktypes import TaskType
from runs.backends.base import (
    BackendStatus,
    ClusterConfig,
    KeptLogs,
    NodeInfo,
    Placement,
    PodLog,
    RunRecord,
    TaskPlan,
    workflow_name,
)
from runs.backends.local import cgroups, processes, submissions, wall_disk
from runs.backends.local import logs as local_logs
from runs.backends.local import nodes as workflow_nodes
from runs.backends.local import step as local_step
from runs.backends.local import user as local_user
from runs.backends.local import wake as local_wake
from runs.backends.local import wall as local_wall
from runs.backends.local.banner import describe
from runs.backends.local.budget import Budget, UserBudget
from runs.backends.local.processes import signal_process
from runs.backends.local.state import Submission, status_of
from runs.backends.local.submissions import read_json
from runs.common.store import TaskFolder

PIDS_MAX = 4096
"""The processes (and threads) a task may have at once (``SIMRUN_TASK_PIDS_MAX``)."""
BUDGET = Budget(files=100_000, bytes=20 << 30, depth=64, check_s=2.0)
"""What a task may keep in its folder and scratch (``SIMRUN_TASK_FILES_MAX``, ...)."""
USER_BUDGET = UserBudget(files=500_000, bytes=100 << 30)
"""What the running tasks of one user may hold together (``SIMRUN_USER_FILES_MAX``, ...)."""
LOG_BYTES = 64 << 20
"""The bytes of an attempt's log (``SIMRUN_TASK_LOG_MB``): its head and tail are kept."""


def physical_memory_gb() -> float:
    """The memory of this machine in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


@dataclass(frozen=True)
class PackagesLimits:
    """The bounds of the installs of environments' packages (``SIMRUN_PACKAGES_*``)."""

    timeout_s: float = 1800.0
    kept: int = 8
    """The venvs of packages kept under the store, the least recently used removed beyond."""
    cache_gb: float = 5.0
    """The most a builder's wheel cache keeps; emptied after an install that left it larger."""
    build_memory_gb: float = local_wall.BUILD_MEMORY_GB
    """The memory of a build (of packages, of sources) behind its wall."""
    build_pids_max: int = local_wall.BUILD_PIDS_MAX
    build_disk_gb: float = wall_disk.DISK_GB
    """What a build may write in its venv (and its wheel cache), in GiB."""
    build_files_max: int = wall_disk.FILES_MAX


class LocalBackend:
    """A backend which runs the tasks of a run as processes on this machine."""

    name = "local"
    runs_images = False
    extra_workers = False
    reserves_nodes = False
    no_reservations = "the local backend has no nodes to reserve: submit without it"
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
        self.cgroup_tag = hashlib.blake2b(str(self.store).encode(), digest_size=4).hexdigest()
        """Ends the names of this store's cgroups (``launch.cgroup_name``)."""
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
        self.callbacks: list[Callable[[], None]] = []
        self.closed = False
        self.ends_seen: set[Path] = set()
        """The exit files the last step saw: a new one is an end to tell subscribers."""
        self.began_seen: set[Path] = set()
        """The pid files naming a process the last step saw: a new one is a start."""

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
                build_memory_gb=settings.SIMRUN_BUILD_MEMORY_GB,
                build_pids_max=settings.SIMRUN_BUILD_PIDS_MAX,
                build_disk_gb=settings.SIMRUN_BUILD_DISK_GB,
                build_files_max=settings.SIMRUN_BUILD_FILES_MAX,
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
        if self.closed:
            raise RuntimeError("the local backend is closed")
        name = workflow_name(record.id)
        path = submissions.submission_file(self.state, name)
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
            nodes=workflow_nodes.nodes(
                record, plans, types, record.local_commands or self.commands
            ),
            snapshots=[str(record.store / "snapshots" / digest) for digest in record.sources],
            packages=record.packages,
        )
        submissions.make_state(self.state)
        path.parent.mkdir(parents=True, exist_ok=True)
        submissions.write_own_json(path, submission.model_dump(mode="json"))
        local_wake.notify(self.address)
        return name

    def refusal(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str | None:
        """An ``image`` of a command task where commands run directly on this machine: it
        would be ignored without a word, the command run with the machine's programs instead
        (nothing of a run's size is bounded here beyond what planning checks)."""
        if (record.local_commands or self.commands) != "direct":
            return None
        imaged = [t.id for t in record.tasks.values() if t.kind == "command" and t.image]
        if not imaged:
            return None
        return (
            f"tasks.{imaged[0]}.image: {record.tasks[imaged[0]].image!r} would not be used: "
            "command tasks run directly on this machine here (commands: direct), with its "
            "programs; give commands: docker to run them in their image, or drop image"
        )

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every launch, start and end of a process that a step
        noticed."""
        self.callbacks.append(callback)

    def versions(self, names: list[str]) -> dict[str, str]:
        """A digest of the status of each named live run as the last step read it
        (``ChangeSignal``): one file read for all; empty while no step rewrote it lately."""
        return local_step.versions(self.state, names)

    def step(self) -> bool:
        """Start what may start, notice what began and ended (``step``); whether a process
        was launched, began or ended. Another process stepping makes this one return False."""
        return local_step.step(self)

    def run_steps(self, stop: threading.Event, poll_s: float = local_step.POLL_S) -> None:
        """Step until ``stop`` is set: at once when woken (a submission, an end), else every
        poll_s. First kills the processes that a service before left for ended or unknown runs.
        """
        local_step.run_steps(self, stop, poll_s)

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

    # Status and control.

    def status(self, name: str) -> BackendStatus:
        """The phases of the nodes of a run; KeyError for an unknown run."""
        waiting = (read_json(submissions.waiting_file(self.state)) or {}).get(name, {})
        view = submissions.view(self.state, submissions.read_submission(self.state, name))
        return status_of(view, waiting, self.hostname)

    def cancel(self, name: str) -> None:
        """End a run: SIGTERM to its processes, SIGKILL after the grace; KeyError if unknown.

        No process of the run starts or is retried any more.
        """
        self._halt(name, "cancel")

    def stop(self, name: str) -> None:
        """End a run whose state is decided, as ``cancel``."""
        self._halt(name, "stop")

    def _halt(self, name: str, how: str) -> None:
        submission = submissions.read_submission(self.state, name)
        stop = submissions.stop_file(self.state, name)
        if not stop.exists():
            submissions.write_own_json(stop, {"at": time.time(), "how": how})
        for _, attempt in submissions.view(self.state, submission).running():
            signal_process(attempt.pid or {}, signal.SIGTERM)
        local_wake.notify(self.address)

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        """The logs of the processes of a task, oldest first; KeyError for an unknown run."""
        return local_logs.logs(self.state, name, task_id, tail_lines)

    def keep_logs(self, name: str, task_id: str, folder: TaskFolder) -> KeptLogs:
        """Each launcher wrote its attempt's log into the store as it ran: nothing to copy;
        complete once every attempt of the task ended."""
        return local_logs.keep_logs(self.state, name, task_id)

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
            for view in (submissions.view(self.state, s) for s in submissions.live(self.state))
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
        self.closed = True

    def kill_orphans(self) -> int:
        """Kill the processes of ended or unknown runs which a service before left running
        (``processes.kill_orphans``); the process groups killed."""
        return processes.kill_orphans(self)
