"""What the launcher does before its process runs: prepare what it needs, then start it.

Before: the packages of the run's environment, the isolation of the network, the venv of the
run, the scratch handed to the task user and the inputs staged as that user. In the child
before its exec: its cgroups, a ``/dev/shm`` of its own, its limit of a file's size, its
task user.

Only the standard library, the harness and siblings: the launcher imports it from its directory
(see ``launcher``), and it imports ``env``, ``cgroups``, ``shm`` and ``budget`` so too.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import functools
import os
import resource
import signal
import socket
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pids  # the sibling module, see the docstring of this module
from launch_file import Ids, Launch

from harness import untrusted

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sh14x"
"""``struct ifreq`` with its flags: the name of an interface and its flags."""


def isolate_network() -> None:
    """Move the launcher, and so all it starts from now on (the sources' build, the staging,
    the task), into a network namespace of its own with only a loopback of its own: no port,
    address or abstract socket of the machine's is theirs to take or reach
    (``SIMRUN_TASK_NETWORK=loopback``, docs/team.md)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(
            error,
            f"its network could not be isolated ({os.strerror(error)}); "
            "SIMRUN_TASK_NETWORK=host gives tasks the machine's network (docs/team.md)",
        )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(IFREQ, b"lo", 0)
        flags = struct.unpack(IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def prepare(launch: Launch, stopped: Callable[[], bool]) -> IO[str] | None:
    """Install the packages of the run's environment (once for every run naming them),
    then isolate the network (``isolate_network``), create the venv of the run and the
    scratch directory, hand both to the task user, and stage the inputs of a command into the
    scratch as that user. The lock that keeps the
    packages' venv while the process runs, if it has one."""
    import env as local_env  # the sibling module, see the docstring of this module

    venv = launch.venv
    user = launch.user
    held = None
    if packages := launch.packages:
        install = local_env.Install(
            store=packages.store,
            packages=tuple(packages.packages),
            timeout_s=packages.timeout_s,
            uid=user.uid if user else None,
            gid=user.gid if user else None,
            kept=packages.kept,
            cache_gb=packages.cache_gb,
            pip_env=packages.pip_env,
        )
        _, held = local_env.ensure_packages(install, stopped)
        pids.end_tree()  # what the packages' build code left running does not outlive it
    try:
        if user and launch.network == "loopback":
            isolate_network()  # the packages came from their index: nothing after needs it
        if venv:
            sources_builder = None
            if user:  # the sources' build code runs as the task user
                env = local_env.build_env(venv.dir)
                sources_builder = local_env.Builder(env=env, uid=user.uid, gid=user.gid)
            snapshots = [Path(s) for s in venv.snapshots]
            local_env.ensure(venv.dir, snapshots, user=sources_builder, base=venv.base)
        scratch = launch.cwd
        scratch.mkdir(parents=True, exist_ok=True)
        # A container runs as the service's docker client, but stages and works as the task
        # user.
        owner = user or launch.stage_user
        if owner:
            _hand_over(scratch, owner)
        if user and venv:
            _hand_over(venv.dir, user)
        if launch.stage:
            _stage(list(launch.stage), launch.store, scratch, owner)
    except BaseException:
        if held is not None:
            held.close()
        raise
    return held


def _hand_over(directory: Path, user: Ids) -> None:
    """Give a directory of the service's (the scratch, the venv) to the task user alone,
    through its descriptor (it is never a link)."""
    with untrusted.directory(directory.parent, [directory.name]) as fd:
        os.fchown(fd, user.uid, user.gid)
        os.fchmod(fd, 0o700)


def _become(user: Ids) -> None:
    """Drop to the task user for good (in a child of the launcher)."""
    os.setgroups([])
    os.setgid(user.gid)
    os.setuid(user.uid)
    os.umask(user.umask)


def _stage(pairs: list[tuple[str, str]], store: Path, scratch: Path, user: Ids | None) -> None:
    """Copy the inputs into the scratch as the task user (a child that dropped to it), so
    only what that user could read is copied; its error, if any, is raised here."""
    from harness.sources import stage

    if not user:
        stage(pairs, store, scratch)
        return
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, measured by the tests that stage as a user
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.close(read)
            _become(user)
            stage(pairs, store, scratch)
        except BaseException as error:  # noqa: BLE001 - told to the launcher, then exit
            number = getattr(error, "errno", None) or 0
            os.write(write, f"{number} {error}".encode(errors="replace")[:2000])
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read(4096).decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        # The child's errno comes first, so a failing disk is a storage error here too.
        number, _, message = said.partition(" ")
        why = message or os.waitstatus_to_exitcode(status)
        raise OSError(int(number) if number.isdigit() else 0, f"staging its inputs failed: {why}")


def _enter(launch: Launch, budget: Any) -> None:
    """In the child before its exec: join its cgroup (as root), get a ``/dev/shm`` of its own
    and its budget's limit of a file's size (a ``budget.Budget``), then become its task user."""
    if launch.cgroup:
        import cgroups  # the sibling module, see the docstring of this module

        cgroups.join(launch.cgroup)
    if launch.pids_cgroup:
        import cgroups

        cgroups.join(launch.pids_cgroup)
    if shm := launch.shm:
        import shm as local_shm  # the sibling module, see the docstring of this module

        try:
            local_shm.own_shm(shm.bytes, shm.inodes)
        except OSError as error:
            print(f"simrun: /dev/shm is the machine's, not the task's own: {error}", flush=True)
    budget.limit_file_size()
    if user := launch.user:
        if not launch.pids_cgroup and launch.pids_max:
            # No pids controller: the limit of the task user's processes, all of its tasks'.
            limit = int(launch.pids_max)
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        _become(user)


def start(launch: Launch) -> subprocess.Popen[bytes]:
    """Start the process in a session of its own (its cgroup, its user) with the launcher's
    output (the pipe of its capped log)."""
    import budget as local_budget  # the sibling module, see the docstring of this module
    import shm as local_shm  # noqa: F401 - imported before the fork, for ``_enter``

    budget = local_budget.Budget.from_json(dataclasses.asdict(launch.budget))

    return subprocess.Popen(
        launch.argv,
        cwd=launch.cwd,
        env=launch.env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        # Safe: the only other thread then is the log's pump, which takes no lock (os calls).
        preexec_fn=functools.partial(_enter, launch, budget),
    )
