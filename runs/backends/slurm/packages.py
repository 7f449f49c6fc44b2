"""``environment.packages`` on Slurm: the run's packages as a venv on the shared store, built
once per content by a Slurm job of its own.

The venv of some packages is ``<store>/environments/slurm-<key>/venv`` (``key``: the packages,
the service's Python and who builds them, ``venvs.packages_key``), kept and shared by every run
naming the same packages. Its build runs user code (the packages' build scripts), so it is a
job like a task's: as the run's login in team mode, in that login's cgroup, limits and
fairshare, on a node where the tasks run. The run's task jobs wait for it in the service (the
service keeps the DAG's edges, as for a task's inputs): none is submitted before the venv is
marked built. Two runs that start together may each submit a build: the second waits for the
first's lock and finds the venv built. A build that fails fails the run with the end of its
log (``<folder>/(packages)-0.log``).
"""

from __future__ import annotations

import math
import os
import pwd
import sys
from pathlib import Path

from harness import untrusted, venvs
from runs.backends.slurm.joblogs import read_text
from runs.backends.slurm.state import NodeSpec

BUILD_NODE = "(packages)"
"""The ledger's name of the node of a run's packages build: never a task's (a task's id
holds no parentheses)."""
TAIL_LINES = 20
"""The lines of a failed build's log its run's failure names."""


def folder(store: Path, packages: list[str], login: str) -> Path:
    """The folder of the venv of ``packages`` built as ``login`` (the service's user: empty),
    made if missing and given to the login, who builds there; the service's folder of
    environments above it lets the logins pass without listing it."""
    uid = pwd.getpwnam(login).pw_uid if login else None
    store.mkdir(parents=True, exist_ok=True)
    environments = untrusted.service_dir(store, [venvs.ENVIRONMENTS])
    try:
        os.fchmod(environments, untrusted.SERVICE_DIR_MODE | 0o001)
        name = f"slurm-{venvs.packages_key(packages, uid)}"
        try:
            os.mkdir(name, 0o755, dir_fd=environments)
        except FileExistsError:
            pass
        else:
            if uid is not None:
                os.chown(name, uid, -1, dir_fd=environments)
    finally:
        os.close(environments)
    return store / venvs.ENVIRONMENTS / name


def build_node(where: Path, packages: list[str], *, memory_gb: float, timeout_s: float) -> NodeSpec:
    """The job that builds the venv in ``where``: ``venvs.py build``, pip told where packages
    are as the service's own pip is (the job gets nothing else of the service's environment),
    within ``memory_gb`` and ``timeout_s`` (Slurm's whole minutes, rounded up)."""
    argv = [sys.executable, venvs.__file__, "build", str(where), *sorted(set(packages))]
    return NodeSpec(
        name=BUILD_NODE,
        task=BUILD_NODE,
        worker=BUILD_NODE,
        kind="packages",
        argv=argv,
        env=venvs.pip_env(),
        cores=1,
        memory_gb=memory_gb,
        retry_memory_gb=memory_gb,
        time_limit=str(math.ceil(timeout_s / 60)),
    )


def built(where: Path) -> bool:
    """Whether the venv in ``where`` was installed to its end."""
    return (where / venvs.BUILT).is_file()


def bin_dir(where: Path) -> Path:
    """The venv's ``bin``: first on the ``PATH`` of the run's jobs (its ``python``, and
    simrun's commands run by it)."""
    return where / "venv" / "bin"


def failure(where: Path, packages: list[str], said: str) -> str:
    """Why a run's packages are not installed: Slurm's words for the build job and the end of
    its log."""
    fd = untrusted.open_dir(where)
    try:
        text = read_text(fd, f"{BUILD_NODE}-0.log")
    finally:
        os.close(fd)
    tail = "\n".join([line for line in text.splitlines() if line.strip()][-TAIL_LINES:])
    named = ", ".join(sorted(set(packages)))
    return f"installing the environment's packages ({named}) failed: {said}:\n{tail}".strip()
