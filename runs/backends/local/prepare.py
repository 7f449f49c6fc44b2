"""What the launcher does before its process runs: prepare what it needs, then start it.

Before: the packages of the run's environment, the isolation of the network, the venv of the
run, the scratch handed to the task user and the inputs staged as that user. In the child
before its exec: its cgroups, a ``/dev/shm`` of its own, its limit of a file's size, its
task user.

Only the standard library, the harness and siblings: the launcher imports it from its directory
(see ``launcher``), and it imports ``env``, ``builds``, ``cgroups``, ``shm`` and ``budget`` so
too.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from launch_file import Ids, Launch
from wall import become, enter, isolate_network
from wall_disk import Disk

from harness import untrusted


def prepare(launch: Launch, stopped: Callable[[], bool]) -> IO[str] | None:
    """Install the packages of the run's environment (once for every run naming them),
    then isolate the network (``isolate_network``), create the venv of the run and the
    scratch directory, hand both to the task user, and stage the inputs of a command into the
    scratch as that user. The lock that keeps the
    packages' venv while the process runs, if it has one."""
    import builds
    import env as local_env  # the sibling module, see the docstring of this module

    venv = launch.venv
    user = launch.user
    held = None
    disk = Disk(bytes=launch.build_disk_bytes, files=launch.build_files_max)
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
            memory_bytes=launch.build_memory_bytes,
            pids_max=launch.build_pids_max,
            disk=disk,
            fenced=tuple(launch.fenced),
        )
        # Built behind the wall of its own (``wall``): nothing of it outlives the build.
        _, held = local_env.ensure_packages(install, stopped)
    try:
        if user and launch.network == "loopback":
            isolate_network()  # the packages came from their index: nothing after needs it
        if venv:  # the sources' build code runs as the task user, behind its wall
            sources_builder = builds.Builder(
                env=builds.build_env(venv.dir),
                uid=user.uid if user else None,
                gid=user.gid if user else None,
                memory_bytes=launch.build_memory_bytes,
                pids_max=launch.build_pids_max,
                keep=(str(launch.store), str(venv.dir.parent)),
                disk=disk,
                fenced=tuple(launch.fenced),
            )
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
            become(user)
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


def kept(launch: Launch) -> list[str]:
    """The folders a task must see below ``/tmp`` (a service whose home is there, as in
    tests): the service's home (the folder of its store and of its scratch), venvs and
    Python; the rest of ``/tmp`` is its own. A kept folder stays as open to the task as it was."""
    scratch_root = launch.cwd.parent.parent
    found = [launch.store.parent, scratch_root.parent, launch.cwd]
    found += [Path(sys.executable).parent.parent, Path(sys.prefix)]
    if launch.venv:
        found += [launch.venv.dir] + ([launch.venv.base] if launch.venv.base else [])
    if launch.packages:
        found.append(launch.packages.dir)
    if launch.argv and launch.argv[0].startswith("/"):
        found.append(Path(launch.argv[0]).parent.parent)
    return [str(path) for path in found]


def _enter(launch: Launch, budget: Any) -> None:
    """In the child before its exec: a ``/dev/shm``, ``/tmp`` and ``/var/tmp`` of its own
    (gone with it, counted in its memory), the service's folders read-only but its own
    (``shm.fence``: a fence that cannot be made fails the start), then as every process of a
    user's code is entered (``wall.enter``): its cgroups, its budget's limit of a file's size,
    its task user."""
    if shm := launch.shm:
        import shm as local_shm  # the sibling module, see the docstring of this module

        try:
            local_shm.private_mounts(shm.bytes, shm.inodes, kept(launch))
        except OSError as error:
            print(
                f"simrun: /dev/shm and /tmp are the machine's, not the task's: {error}", flush=True
            )
        else:  # only its folder and scratch are its to write of the service's folders
            local_shm.fence(launch.fenced, [str(launch.store / launch.task), str(launch.cwd)])
    joined = [path for path in (launch.cgroup, launch.pids_cgroup) if path]
    enter(joined, launch.user, pids_max=launch.pids_max, file_bytes=budget.bytes)


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
