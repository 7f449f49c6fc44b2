"""Running a run's sources on this machine to learn the task types they ship.

The service asks what a run's sources define before it plans the run: their snapshots are
installed into a venv of their own (on the venv of the environment's packages, as a run of
it would have them) and ``python -m harness.describe`` is asked there. That runs the user's
code (its build, its import), so it runs as a task would: behind the wall every process of a
user's code gets (``runs.backends.local.wall``: the owner's task user, a network, memory and
pids cgroups, ``/tmp`` and ``/dev/shm`` of its own, nothing it starts outliving it, within
time limits), never with the service's environment.
Whichever backend runs the tasks, learning runs here, with this machine's task users and
venvs (those of ``runs.backends.local``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import untrusted
from harness.sources import pip_reason
from runs.backends.local import builds, wall_disk
from runs.backends.local import env as local_env
from runs.backends.local import user as local_user
from runs.common.store import pass_only

TEMPORARY = "tmp"
"""The folder of a learning's temporary files (pip's builds among them) in its ``home``."""
TAIL_LINES = 15
"""The lines of a failed install's output an error quotes."""


class SourcesError(Exception):
    """The sources cannot be installed, or the owner's task user cannot run them; the message
    says why, with the output."""


class PackagesError(Exception):
    """The environment's packages cannot be installed; the message says why, with pip's."""


@dataclass(frozen=True)
class Learning:
    """Where and as whom a run's sources are learned, within which limits."""

    home: Path
    """The learning's own folder (the service's): its venv, its temporary files."""
    store: Path
    owner_id: int | None
    task_uid_base: int | None
    install_timeout_s: float
    describe_timeout_s: float
    packages_timeout_s: float
    environments_kept: int
    packages_cache_gb: float
    memory_gb: float
    """The memory of the install and of the description, each behind its wall."""
    pids_max: int
    disk_gb: float
    """What the install and the description may each write in their folders."""
    files_max: int
    fenced: tuple[str, ...] = ()
    """The folders of users' things (the store, the scratch, the venvs of runs), read-only to
    a learning but for its own folders (``runs.backends.local.shm.fence``)."""


@dataclass(frozen=True)
class Described:
    """What ``python -m harness.describe`` did: its exit code (None: stopped at its time
    limit) and its output."""

    returncode: int | None
    stdout: str
    stderr: str


def describe(
    learning: Learning,
    snapshots: list[Path],
    packages: Sequence[str],
    asked: Mapping[str, list[Any]],
    stdin: str,
) -> Described:
    """Install ``snapshots`` on the venv of ``packages`` (each kept between learnings) and
    ask their types, with ``stdin``. ``SourcesError`` or ``PackagesError`` when they cannot
    be installed."""
    try:
        with (
            _temporary(learning.home, builder(learning)) as user,
            _packages(learning, packages, user) as base,
        ):
            python = local_env.ensure(
                learning.home / "venv",
                snapshots,
                user=user,
                base=base,
                timeout_s=learning.install_timeout_s,
            )
            done = local_env.run_bounded(
                [str(python), "-m", "harness.describe"],
                user,
                cwd=learning.home,
                timeout_s=learning.describe_timeout_s,
                stdin=stdin,
            )
            if done.over_disk:  # what it wrote into the venv kept for the next learning goes
                local_env.remove(learning.home / "venv")
    except local_env.BuildTimeout as error:
        raise SourcesError(f"{error} (SIMRUN_LEARN_INSTALL_S)") from None
    except subprocess.CalledProcessError as error:
        raise SourcesError(not_installed(error.output)) from None
    except local_env.PackagesError as error:
        raise PackagesError(str(error)) from None
    return Described(done.returncode, _text(done.stdout), _text(done.stderr))


def builder(learning: Learning) -> builds.Builder:
    """Who runs the code of an owner's sources: the owner's task user where the service runs
    tasks as their owners' (root, ``SIMRUN_TASK_UID_BASE``), else the service's user; never
    with the service's environment (its secret key, its database). ``SourcesError`` where the
    task user cannot run this Python."""
    walled = builds.Builder(
        env=builds.build_env(learning.home),
        memory_bytes=math.ceil(learning.memory_gb * 2**30),
        pids_max=learning.pids_max,
        keep=(str(learning.store),),
        disk=wall_disk.Disk(bytes=math.ceil(learning.disk_gb * 2**30), files=learning.files_max),
        fenced=learning.fenced,
    )
    user = local_user.for_owner(learning.owner_id, learning.task_uid_base)
    if user is None:
        return walled
    root = learning.store
    pass_only(root, root / "learned-types", root / "snapshots")
    pass_only(root / local_env.ENVIRONMENTS)
    if problem := local_user.unreachable(Path(sys.executable).resolve(), learning.home):
        raise SourcesError(f"the sources' types cannot be learned as your task user: {problem}")
    return dataclasses.replace(walled, uid=user.uid, gid=user.gid)


@contextlib.contextmanager
def _temporary(home: Path, user: builds.Builder) -> Iterator[builds.Builder]:
    """``user`` with a folder of its own for temporary files in ``home``, made afresh by the
    service (``home`` is the service's, closed to the task user) and removed at the end with
    whatever a killed learning left there, so nothing of it lands in the machine's /tmp."""
    untrusted.remove_tree(home, [TEMPORARY])
    folder = home / TEMPORARY
    folder.mkdir(mode=0o700)
    if user.uid is not None:
        os.chown(folder, user.uid, user.gid if user.gid is not None else -1)
    try:
        yield dataclasses.replace(user, env={**user.env, "TMPDIR": str(folder)})
    finally:
        untrusted.remove_tree(home, [TEMPORARY])


@contextlib.contextmanager
def _packages(
    learning: Learning, packages: Sequence[str], user: builds.Builder
) -> Iterator[Path | None]:
    """The venv of the environment's packages, installed as a run of it would have them and
    kept while the sources' types are learned on it; None without packages."""
    if not packages:
        yield None
        return
    install = local_env.Install(
        store=learning.store,
        packages=tuple(packages),
        timeout_s=learning.packages_timeout_s,
        uid=user.uid,
        gid=user.gid,
        kept=learning.environments_kept,
        cache_gb=learning.packages_cache_gb,
        pip_env=local_env.pip_env(),
        memory_bytes=user.memory_bytes,
        pids_max=user.pids_max,
        disk=user.disk,
        fenced=user.fenced,
    )
    _, held = local_env.ensure_packages(install)
    with held:
        yield install.directory


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def not_installed(output: str | bytes | None) -> str:
    """Why the sources could not be installed, from the output of the process that ran pip:
    pip's reason first (``harness.sources.pip_reason``), then pip's last lines, not the
    traceback of the process that ran it."""
    said = _text(output).split(TRACEBACK)[0]
    return (
        f"the sources cannot be installed: pip install -e failed: {pip_reason(said)}\n{tail(said)}"
    )


TRACEBACK = "Traceback (most recent call last):"


def tail(output: str | bytes | None) -> str:
    """The last ``TAIL_LINES`` lines of an output that say something."""
    lines = [line for line in _text(output).splitlines() if line.strip()]
    return "\n".join(lines[-TAIL_LINES:])
