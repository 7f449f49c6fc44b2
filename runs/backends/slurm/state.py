"""What the Slurm backend keeps of a run: its nodes and every job it submitted for them.

A run is ``<store>/slurm/runs/<workflow>.json``: the nodes of its DAG (what each waits for,
runs and needs) and one ``Job`` per ``sbatch`` (an array's elements each), with what the
polls learnt of it. Any process of the service reads it; writes happen under the backend's
file lock (``Ledger.lock``), each file replaced whole, so a restarted service goes on from it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from harness import untrusted


class NodeSpec(BaseModel):
    """A node of the DAG of a run as one job runs it."""

    name: str = Field(description="<task>-w0, <task>-extra(<i>:<n>), <task>-merge, <task>")
    task: str
    worker: str = Field(description="The key of its attempts: SIMRUN_WORKER, or the node")
    kind: str
    after: list[str] = Field(default_factory=list, description="Nodes that must succeed first")
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict, description="Its SIMRUN_* variables")
    stage: list[tuple[str, str]] = Field(
        default_factory=list, description="(store path, port) of the inputs of a command"
    )
    cores: int
    memory_gb: float
    retry_memory_gb: float
    array: str = Field(default="", description="<task>-extra for an extra worker")
    time_limit: str = Field(
        default="", description="--time of its jobs; empty: the site's (SIMRUN_SLURM_TIME_LIMIT)"
    )


class Job(BaseModel):
    """One Slurm job of a node (an array element is one too) and what the polls saw of it."""

    node: str
    job_id: str = Field(description="123, or 123_4 for an element of an array")
    attempt: int = Field(description="The attempt number of its first run")
    memory_gb: float
    submitted_at: float
    state: str = "PENDING"
    reason: str = ""
    host: str = ""
    restarts: int = Field(default=0, description="Requeues seen (Slurm's RestartCnt)")
    restart_started: list[float | None] = Field(
        default_factory=list, description="When each run before a requeue started"
    )
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    final: bool = False
    gone_at: float | None = Field(
        default=None, description="When a poll first missed it in squeue: sacct is asked"
    )
    stuck_since: float | None = Field(
        default=None,
        description="Since when it waits for a reason that never clears by itself",
    )

    @property
    def latest_attempt(self) -> int:
        return self.attempt + self.restarts


class Submission(BaseModel):
    """A run as the Slurm backend keeps it."""

    name: str
    run: str
    store: Path
    created: float
    nodes: list[NodeSpec]
    login: str = Field(
        default="", description="The Unix login its jobs run as (team mode); empty: the service's"
    )
    jobs: list[Job] = Field(default_factory=list)
    stopped: str = Field(default="", description="cancel or stop, once asked")
    stopped_at: float | None = None
    ended: bool = Field(default=False, description="Every job final and nothing to submit")
    packages: list[str] = Field(default_factory=list, description="environment.packages")
    environment: Path | None = Field(
        default=None, description="The folder of the venv of its packages (``packages``)"
    )
    build: NodeSpec | None = Field(
        default=None, description="The job that builds that venv, when it was not built"
    )
    build_failed: str = Field(default="", description="Why the venv could not be built")
    reservation: str = Field(default="", description="The Slurm reservation its jobs go into")

    def node(self, name: str) -> NodeSpec:
        if self.build is not None and name == self.build.name:
            return self.build
        return next(n for n in self.nodes if n.name == name)

    def jobs_of(self, node: str) -> list[Job]:
        return [j for j in self.jobs if j.node == node]

    def task_dir(self, task: str) -> Path:
        return self.store / "runs" / self.run / "tasks" / task


class Ledger:
    """The backend's files under ``<store>/slurm`` (the service's alone)."""

    def __init__(self, store: Path) -> None:
        self.root = Path(store) / "slurm"

    def _runs(self) -> Path:
        return self.root / "runs"

    def path(self, name: str) -> Path:
        return self._runs() / f"{name}.json"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The backend's lock: one process at a time polls Slurm or writes a run."""
        self._runs().mkdir(mode=0o750, parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read(self, name: str) -> Submission:
        """A run; KeyError when the backend never had it."""
        try:
            return Submission.model_validate_json(self.path(name).read_text())
        except FileNotFoundError:
            raise KeyError(name) from None

    def write(self, submission: Submission) -> None:
        fd = untrusted.open_dir(self._runs())
        try:
            untrusted.write_atomic_at(fd, f"{submission.name}.json", submission.model_dump_json())
        finally:
            os.close(fd)

    def live(self) -> list[Submission]:
        """The runs that have not ended, oldest first."""
        found = []
        for path in self._runs().glob("*.json") if self._runs().exists() else []:
            try:
                submission = Submission.model_validate_json(path.read_text())
            except (OSError, ValueError):
                continue
            if not submission.ended:
                found.append(submission)
        return sorted(found, key=lambda s: (s.created, s.name))

    def write_meta(self, name: str, data: str) -> None:
        """A file of the backend beside the runs (the last poll, the versions)."""
        self.root.mkdir(mode=0o750, parents=True, exist_ok=True)
        fd = untrusted.open_dir(self.root)
        try:
            untrusted.write_atomic_at(fd, name, data)
        finally:
            os.close(fd)

    def read_meta(self, name: str) -> str | None:
        try:
            return (self.root / name).read_text()
        except OSError:
            return None
