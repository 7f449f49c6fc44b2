"""The launch file: what the step of the local backend tells the launcher of one attempt.

The step writes ``<node>-<attempt>.launch`` in the task's ``logs/`` folder (``Launch``), the
launcher reads it through an inherited descriptor and runs what it says; the service reads
back when an attempt started and what it held (``Launched``, all a refused attempt records).

Only pydantic and the standard library: the launcher imports it from its directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

STARTING_EXIT = 4
"""The exit code recorded when the process could not be prepared or started."""


class Launched(BaseModel):
    """When the step launched an attempt (or refused it) and what it holds of the machine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    started: float
    cores: int
    memory_gb: float


class Ids(BaseModel):
    """A task user: the ids a process runs as and the umask of what it creates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uid: int
    gid: int
    umask: int


class Shm(BaseModel):
    """A ``/dev/shm`` of the task's own: its size and its most files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bytes: int
    inodes: int


class Venv(BaseModel):
    """The venv of a run with sources: its snapshots installed on the packages' venv ``base``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path
    snapshots: list[str]
    base: Path | None = None


class Packages(BaseModel):
    """The install of an environment's packages the launcher ensures before the process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path
    store: Path
    packages: list[str]
    timeout_s: float
    kept: int
    cache_gb: float
    pip_env: dict[str, str]
    """Where the service's pip finds packages (an index, a mirror): in the launch file, which
    only the service's group reads, not on a command line."""


class FileBudget(BaseModel):
    """What the task may keep in its folder and scratch (``budget.Budget``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: int
    bytes: int
    depth: int
    check_s: float


class UserLedger(BaseModel):
    """The budget of the running tasks of the run's owner, its ledger and this attempt's entry
    there (``budget.Ledger``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: int
    bytes: int
    ledger: Path
    entry: str


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
    budget: FileBudget
    user_budget: UserLedger | None
    log_bytes: int
    shm: Shm | None
    network: Literal["loopback", "host"]
    venv: Venv | None
    packages: Packages | None
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
