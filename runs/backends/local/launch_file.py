"""The launch file: what the step of the local backend tells the launcher of one attempt.

The step writes ``<node>-<attempt>.launch`` in the task's ``logs/`` folder (``Launch``), the
launcher reads it through an inherited descriptor and runs what it says; the service reads
back when an attempt started and what it held (``Launched``, all a refused attempt records).

Only the standard library: the launcher imports it from its directory at every attempt's
start, where a model library's import and class building cost a fifth of a second. The
dataclasses are the contract both sides type-check against; ``load`` builds them back, an
unknown or a missing field refused as a wrong keyword.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

STARTING_EXIT = 4
"""The exit code recorded when the process could not be prepared or started."""


@dataclass(frozen=True)
class Launched:
    """When the step launched an attempt (or refused it) and what it holds of the machine."""

    started: float
    cores: int
    memory_gb: float


@dataclass(frozen=True)
class Ids:
    """A task user: the ids a process runs as and the umask of what it creates."""

    uid: int
    gid: int
    umask: int


@dataclass(frozen=True)
class Shm:
    """A ``/dev/shm`` of the task's own: its size and its most files."""

    bytes: int
    inodes: int


@dataclass(frozen=True)
class Venv:
    """The venv of a run with sources: its snapshots installed on the packages' venv ``base``."""

    dir: Path
    snapshots: list[str]
    base: Path | None = None


@dataclass(frozen=True)
class Packages:
    """The install of an environment's packages the launcher ensures before the process."""

    dir: Path
    store: Path
    packages: list[str]
    timeout_s: float
    kept: int
    cache_gb: float
    pip_env: dict[str, str]
    """Where the service's pip finds packages (an index, a mirror): in the launch file, which
    only the service's group reads, not on a command line."""


@dataclass(frozen=True)
class FileBudget:
    """What the task may keep in its folder and scratch (``budget.Budget``)."""

    files: int
    bytes: int
    depth: int
    check_s: float


@dataclass(frozen=True)
class UserLedger:
    """The budget of the running tasks of the run's owner, its ledger and this attempt's entry
    there (``budget.Ledger``)."""

    files: int
    bytes: int
    ledger: Path
    entry: str


@dataclass(frozen=True)
class Launch(Launched):
    """Everything the launcher needs to prepare, start, watch and record one attempt."""

    name: str
    """``<node>-<attempt>``: the stem of the attempt's files in ``logs/``."""
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    """The attempt's scratch, made by the launcher and removed with the process."""
    store: Path
    stage: list[tuple[str, str]]
    """(store path, scratch path) of the inputs of a command."""
    cgroup: Path | None
    pids_cgroup: Path | None
    pids_max: int
    task: str
    """The task's folder below the store."""
    siblings: list[str]
    """The task folders of its run (``budget.measure``)."""
    budget: FileBudget
    user_budget: UserLedger | None
    log_bytes: int
    shm: Shm | None
    network: Literal["loopback", "host"]
    venv: Venv | None
    packages: Packages | None
    build_memory_bytes: int
    """The memory of a build of the packages or of the run's sources, behind its wall."""
    build_pids_max: int
    build_disk_bytes: int
    """What a build of the packages or of the run's sources may write in its folders."""
    build_files_max: int
    container: str | None
    """The name of the attempt's Docker container, None for a process of this machine."""
    notify: str
    """The address of the step's wake-up socket."""
    report: str | None
    """Below the store: the report the launcher writes for a plain command, which writes none."""
    live: bool
    """Whether the launcher samples the process's live memory (a plain command's)."""
    user: Ids | None
    """The task user the process runs as; None as the service (docker runs as the service)."""
    stage_user: Ids | None
    """The task user that stages the inputs and owns the scratch."""
    fenced: list[str] = dataclasses.field(default_factory=list)
    """The folders of users' things (the store, the scratch, the venvs of runs) read-only to
    the process and its builds but for the folders they write (``shm.fence``)."""


def dump(written: Launched) -> str:
    """A launch file's text."""
    return json.dumps(dataclasses.asdict(written), default=str)


def load(text: str | bytes) -> Launch:
    """A launch file read back, its nested parts and paths rebuilt."""
    data: dict[str, Any] = json.loads(text)

    def path(name: str, within: dict[str, Any] = data) -> None:
        if within.get(name) is not None:
            within[name] = Path(within[name])

    def part(name: str, kind: Any, *paths: str) -> None:
        if (found := data.get(name)) is not None:
            for each in paths:
                path(each, found)
            data[name] = kind(**found)

    for name in ("cwd", "store", "cgroup", "pids_cgroup"):
        path(name)
    data["stage"] = [(source, target) for source, target in data.get("stage", [])]
    part("budget", FileBudget)
    part("user_budget", UserLedger, "ledger")
    part("shm", Shm)
    part("venv", Venv, "dir", "base")
    part("packages", Packages, "dir", "store")
    part("user", Ids)
    part("stage_user", Ids)
    return Launch(**data)
