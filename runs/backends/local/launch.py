"""The launch of an attempt on the local backend: its launch file and its launcher.

The step hands the run's folder to its task user, makes the attempt's cgroups, writes what the
launcher needs (``launch_file.Launch``) in the task's ``logs/`` folder and starts the launcher
detached, with the launch file and the folder as inherited descriptors: a launcher forked by
the launcher this process started ahead (``launcher_server``), not a new Python each time.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import untrusted
from harness.config import STOP_MARGIN_S
from harness.report import report_path
from runs.backends.local import cgroups, launcher_server
from runs.backends.local import env as local_env
from runs.backends.local import shm as local_shm
from runs.backends.local import user as local_user
from runs.backends.local.launch_file import (
    FileBudget,
    Ids,
    Launch,
    Packages,
    Shm,
    UserLedger,
    Venv,
    dump,
)
from runs.backends.local.logs import logs_dir
from runs.backends.local.state import NodeSpec, NodeView, Submission, next_memory_gb
from runs.common.store import pass_only

if TYPE_CHECKING:
    from runs.backends.local.backend import LocalBackend

LAUNCHER = Path(__file__).with_name("launcher.py")
PASSED_ENV = ("LANG", "LC_ALL", "TZ")
"""The only variables of the service's environment its processes get (besides SIMRUN_*)."""
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


def start(backend: LocalBackend, submission: Submission, node: NodeView) -> None:
    """Start the next attempt of a node through the launcher."""
    logs = logs_dir(submission, node.spec.task)
    try:
        launch(backend, submission, node, logs)
    finally:
        os.close(logs)


def launch(backend: LocalBackend, submission: Submission, node: NodeView, logs: int) -> None:
    """Write the launch file of an attempt in its ``logs/`` folder (``logs``, a descriptor)
    and start its launcher, which inherits the launch file and the folder."""
    spec, number = node.spec, len(node.attempts)
    stem = f"{spec.name}-{number}"
    written = launch_file(backend, submission, node, logs)
    # The service's group reads it, never a task (``logs/`` is the service's).
    untrusted.write_atomic_at(logs, f"{stem}.launch", dump(written), mode=0o640)
    log = untrusted.open_own(logs, f"{stem}.log")
    launch_fd = os.open(f"{stem}.launch", untrusted.FILE_FLAGS, dir_fd=logs)
    try:
        SERVER.hand(launch_fd, logs, log)
    finally:
        os.close(launch_fd)
        os.close(log)


class LauncherServer:
    """The launcher started ahead (``launcher_server``) by this process, at its first launch:
    ``python launcher.py SOCKET_FD`` with the launcher's environment, in a session of its own,
    on one end of a socket pair whose other end only this process holds (a process forked
    from this one starts its own). No path nor run id on any command line (``ps`` shows it to
    every user): a launch is handed as descriptors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.peer: socket.socket | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] | None = None
        """The environment the server was started with, its launchers'."""
        self.python: str | None = None
        """The Python the server runs, its launchers' (and their builds')."""
        os.register_at_fork(after_in_child=self._forked)

    def hand(self, launch_fd: int, logs: int, log: int) -> int:
        """Fork a launcher of the launch file ``launch_fd`` with the ``logs/`` folder and the
        log; its pid. A server found gone before the launch was handed is started again; one
        gone while it was handed raises ``ConnectionError`` (a launcher may have started: the
        step records the attempt lost if none names itself)."""
        with self.lock:
            env = launcher_env()
            if (env, sys.executable) != (self.env, self.python):  # those of the launch's time
                self.forget()
            for again in (True, False):
                peer = self.peer or self._start(env)
                try:
                    peer.sendmsg([b"L"], launcher_server.rights(launch_fd, logs, log))
                except OSError:
                    self.forget()
                    if again:
                        continue
                    raise
                try:
                    return launcher_server.answer(peer)
                except ConnectionError:
                    self.forget()
                    raise
            raise AssertionError("unreachable")

    def _start(self, env: dict[str, str]) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, str(LAUNCHER), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self.peer, self.env, self.python = ours, env, sys.executable
        return ours

    def _forked(self) -> None:
        """In a child forked from this process: the server is the parent's (its end closed
        here, its lock new), the child starts its own when it launches."""
        self.lock = threading.Lock()
        if self.peer is not None:
            self.peer.close()
        self.peer, self.process, self.env, self.python = None, None, None, None

    def forget(self) -> None:
        """Close this process's end (the server then exits) and reap the server if it ended."""
        if self.peer is not None:
            self.peer.close()
            self.peer = None
        if self.process is not None:
            self.process.poll()
        self.process, self.env, self.python = None, None, None


SERVER = LauncherServer()


def cgroup_name(backend: LocalBackend, run: str, node: str, number: int) -> str:
    """The cgroups of an attempt, ``<run>.<node>.<attempt>.<store>``: the parents are the
    machine's, shared by every service (and test) on it, so the store's tag keeps each
    service's own apart, a run id used by two of them included."""
    return f"{run}.{node}.{number}.{backend.cgroup_tag}"


def launch_file(backend: LocalBackend, submission: Submission, node: NodeView, logs: int) -> Launch:
    """What the launcher of the next attempt of a node runs, as what user, in which cgroups
    (made here) and within which budgets; the run's folder is handed to its task user first."""
    spec, number = node.spec, len(node.attempts)
    memory_gb = next_memory_gb(node)
    task_dir = submission.task_dir(spec.task)
    stem = f"{spec.name}-{number}"
    scratch = backend.scratch / submission.run / stem
    user = isolate(backend, submission, logs)
    cgroup = None
    pids_cgroup = None
    name = cgroup_name(backend, submission.run, spec.name, number)
    if backend.hierarchy is not None and not spec.image:
        cgroup = cgroups.create(backend.hierarchy, name, math.ceil(memory_gb * 2**30))
    if backend.pids_parent is not None and not spec.image:
        pids_cgroup = cgroups.create_pids(backend.pids_parent, name, backend.pids_max)
    install = packages(backend, submission, user) if not spec.image else None
    venv = backend.envs / submission.run if submission.snapshots else None
    base = install.dir if install else None
    env = {
        **task_env(venv or base, scratch, user),
        **spec.env,
        "SIMRUN_ATTEMPT": str(number),
        "SIMRUN_SCRATCH": str(scratch),
        "SIMRUN_MEMORY_LIMIT_GB": f"{memory_gb:g}",
        "SIMRUN_MEMORY_SOURCE": "cgroup" if cgroup is not None else "process",
        # What running units get after a SIGTERM, so the process ends before the SIGKILL.
        "SIMRUN_GRACE_S": f"{backend.grace_s - min(STOP_MARGIN_S, backend.grace_s / 2):g}",
    }
    container = f"simrun-{submission.run}-{spec.name}-{number}" if spec.image else None
    argv = spec.argv
    if container is not None:
        argv = docker_argv(spec, container, memory_gb, env, scratch, submission.store, user)
    report = report_path(task_dir, spec.worker, number).relative_to(submission.store)
    ids = None if user is None else Ids(uid=user.uid, gid=user.gid, umask=local_user.UMASK)
    return Launch(
        name=stem,
        argv=argv,
        env=env,
        cwd=scratch,
        store=submission.store,
        stage=spec.stage,
        cgroup=cgroup,
        pids_cgroup=pids_cgroup,
        pids_max=backend.pids_max,
        task=task_dir.relative_to(submission.store).as_posix(),
        siblings=sorted({each.task for each in submission.nodes}),
        budget=FileBudget(**backend.budget.to_json()),
        user_budget=user_budget(backend, submission, name),
        log_bytes=backend.log_bytes,
        # A /dev/shm of its own as large as its memory (a container has its own).
        shm=Shm(bytes=math.ceil(memory_gb * 2**30), inodes=backend.budget.files)
        if container is None and local_shm.usable(submission.store, backend.scratch)
        else None,
        network="host" if backend.task_network == "host" else "loopback",
        venv=Venv(dir=venv, snapshots=submission.snapshots, base=base) if venv else None,
        packages=install,
        build_memory_bytes=math.ceil(backend.packages.build_memory_gb * 2**30),
        build_pids_max=backend.packages.build_pids_max,
        build_disk_bytes=math.ceil(backend.packages.build_disk_gb * 2**30),
        build_files_max=backend.packages.build_files_max,
        container=container,
        notify=backend.address,
        cores=spec.cores,
        memory_gb=memory_gb,
        # When it was launched, not when this step began: an end recorded meanwhile
        # (the one that freed its cores) comes before it.
        started=time.time(),
        # A plain command writes no report: the launcher writes its measured peak.
        report=report.as_posix() if spec.kind == "command" and container is None else None,
        # Nor its live memory: the launcher samples it (``<stem>.live.json`` in logs/).
        live=spec.kind == "command" and container is None,
        # docker runs as the service (its socket is root's); the container as the user.
        user=None if container is not None else ids,
        fenced=[str(submission.store), str(backend.scratch), str(backend.envs)],
        stage_user=ids,
    )


def packages(
    backend: LocalBackend, submission: Submission, user: local_user.TaskUser | None
) -> Packages | None:
    """What the launcher needs to install the packages of a run's environment (or find
    them installed): None for a run without packages."""
    if not submission.packages:
        return None
    limits = backend.packages
    install = local_env.Install(
        store=submission.store,
        packages=tuple(submission.packages),
        timeout_s=limits.timeout_s,
        uid=user.uid if user else None,
        gid=user.gid if user else None,
    )
    return Packages(
        dir=install.directory,
        store=submission.store,
        packages=submission.packages,
        timeout_s=limits.timeout_s,
        kept=limits.kept,
        cache_gb=limits.cache_gb,
        pip_env=local_env.pip_env(),
    )


def user_budget(backend: LocalBackend, submission: Submission, name: str) -> UserLedger | None:
    """The budget of the running tasks of the run's owner for a launch: the budget, the
    owner's ledger (``<state>/usage/<owner>/``, the service's, made if missing) and the
    attempt's entry there; None for a run without an owner."""
    if submission.owner is None:
        return None
    ledger = ["usage", str(submission.owner)]
    os.close(untrusted.service_dir(backend.state, ledger[:1]))
    os.close(untrusted.service_dir(backend.state, ledger))
    return UserLedger(
        **backend.user_budget.to_json(), ledger=backend.state.joinpath(*ledger), entry=name
    )


def isolate(backend: LocalBackend, submission: Submission, logs: int) -> local_user.TaskUser | None:
    """The task user of a run's processes, with the run's directory handed to it and the
    roots it crosses made passable; None when processes run as the service's user."""
    user = local_user.for_owner(submission.owner, backend.task_uid_base)
    if user is None:
        return None
    store_runs = submission.store / "runs"
    snapshots = submission.store / "snapshots"
    pass_only(submission.store, store_runs, snapshots, backend.scratch, backend.envs)
    if submission.packages:
        pass_only(submission.store / local_env.ENVIRONMENTS)
    pass_only(backend.scratch / submission.run)
    with untrusted.directory(store_runs, [submission.run]) as run:
        local_user.give(run, user, skip=frozenset({"logs"}))
    local_user.keep(logs, user)
    return user


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
