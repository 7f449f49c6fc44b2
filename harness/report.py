"""What a worker did: its report, and the progress the controller reads.

A report is ``task_dir/workers/<worker>-<attempt>.json``; ``progress.jsonl`` has one line per
unit done. The service reads reports through ``read_report`` and counts the distinct units of
``progress.jsonl`` by ``PROGRESS_UNIT``, the failed ones (a unit a split type says failed
without failing its task: ``"failed": "<why>"`` ends its line) by ``PROGRESS_FAILED``; a type
that gives its units' rows appends them to ``rows.jsonl`` (``UNIT_ROWS``). While a worker
runs, ``task_dir/live/<worker>-<attempt>.json`` holds its recent memory samples
(``LiveMemory``), for the run page.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from harness.files import write_atomic

HARNESS_STARTED = "SIMRUN_HARNESS_STARTED"
"""The environment variable with the start of the harness, kept across its restart."""
NODE_ENV = ("SIMRUN_NODE", "NODE_NAME")
"""Where the node name is read (the downward API of a pod), else the host name."""
PROGRESS_UNIT = re.compile(rb'"unit":\s*(\d+)')
PROGRESS_FAILED = re.compile(rb'"unit":\s*(\d+)[^\n]*, "failed":\s*("(?:[^"\\\n]|\\.)*")')
"""A failed unit's line: its unit and why, a JSON string."""
FAILURE_CHARS = 500
"""A failed unit's why is cut to this many characters in its progress line."""
UNIT_ROWS = "rows.jsonl"
"""``{"unit": n, "row": {...}}`` per unit done, beside ``progress.jsonl``: the table so far."""


@dataclass
class WorkerReport:
    """What a worker did, written as ``task_dir/workers/<worker>-<attempt>.json``."""

    worker: str
    """The worker id."""
    node: str
    """The server the worker ran on."""
    processes: int
    """The number of processes of the pool."""
    units_done: list[int] = field(default_factory=list)
    """The units the worker completed."""
    seconds: float = 0.0
    """The duration of the work, from its start (after ``prepare_seconds``) to its end."""
    peak_memory_bytes: int | None = None
    """The peak of the memory the kernel cannot reclaim at the limit (anonymous memory above
    all, no page cache): ``MemorySampler.high_water``, from ``peak_source``."""
    memory_limit_bytes: int | None = None
    """The memory limit the worker sized its pool by."""
    per_worker_gb: float = 0.0
    """The memory per process in GiB the worker was sized with."""
    oom_kills: int = 0
    """The processes of its cgroup the OOM killer killed while it ran: the change of the
    counter, the evidence that an exit 137 was a kill for memory."""
    unit_seconds: float = 0.0
    """The seconds of the units it completed, each measured in the process that computed it
    (the setup of a process in its first unit), summed."""
    failed: bool = False
    """A unit failed (exit 3), or the command of simrun-exec failed; a stop or kill is none."""
    completed: bool | None = None
    """Its work ended as it should: every unit it could claim done (simrun-worker), the command
    exited 0 (simrun-exec, the local launcher); False after a failure, a stop, an error of its
    configuration or of the store; None in a report of an older harness. Only a completed or
    OOM-killed attempt is evidence of the memory its task type needs."""
    started: float | None = None
    """When the harness started, seconds since the epoch, before it installed the sources."""
    prepare_seconds: float = 0.0
    """From the start of the harness to the start of its work: sources, restart, imports,
    staging."""
    cpu_seconds: float = 0.0
    """User and system seconds of the harness, of the children it reaped (simrun-exec's
    command) and of the units it completed, each measured in its pool process."""
    throttled_seconds: float | None = None
    """Seconds the cgroup waited for its CPU quota during the work; None without a cgroup of
    its own (the local backend)."""
    peak_source: str = "sampled"
    """Where ``peak_memory_bytes`` came from: ``cgroup-v1-max-usage``, ``cgroup-v2-peak`` (the
    kernel's high-water mark of the cgroup less its page cache), ``vmhwm`` (the processes'
    peaks summed, a lower bound) or ``sampled`` (the largest sample; every report before)."""

    def to_json(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, text: str) -> WorkerReport:
        """Read a report; a field this version does not know is ignored."""
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def report_path(task_dir: Path, worker: str, attempt: int = 0) -> Path:
    """Where the report of an attempt of a worker is."""
    return task_dir / "workers" / f"{worker}-{attempt}.json"


def write_report(report: WorkerReport, task_dir: Path, attempt: int = 0) -> Path:
    """Write the report as ``task_dir/workers/<worker>-<attempt>.json`` (temp file + rename)."""
    path = report_path(task_dir, report.worker, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, report.to_json())


def read_report(path: Path) -> WorkerReport:
    """A report written by ``write_report`` (of this or a newer harness)."""
    return WorkerReport.from_json(path.read_text())


LIVE_SAMPLES = 120
"""Memory samples a live file keeps: the latest, one per heartbeat."""


@dataclass
class LiveMemory:
    """The recent memory of a running worker, ``task_dir/live/<worker>-<attempt>.json``.

    Rewritten (temp file + rename) at every heartbeat, so the service can show a worker's
    memory while it runs; the report, written at its end, stays the record.
    """

    samples: list[tuple[float, int]] = field(default_factory=list)
    """(Unix time, bytes): the largest sample of each heartbeat, the last ``LIVE_SAMPLES``."""
    peak_bytes: int | None = None
    """The largest sample so far (the report's peak may be higher: the kernel's mark)."""
    updated: float = 0.0
    """When it was written (Unix time)."""

    def to_json(self) -> str:
        return json.dumps(
            {"samples": self.samples, "peak_bytes": self.peak_bytes, "updated": self.updated}
        )

    @classmethod
    def from_json(cls, text: str) -> LiveMemory:
        """Read a live file; ValueError for one that is not what ``to_json`` writes."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a live file is a JSON object")
        samples = [(float(t), int(b)) for t, b in data.get("samples", [])[-LIVE_SAMPLES:]]
        peak = data.get("peak_bytes")
        return cls(
            samples=samples,
            peak_bytes=None if peak is None else int(peak),
            updated=float(data.get("updated", 0.0)),
        )


def live_path(task_dir: Path, worker: str, attempt: int = 0) -> Path:
    """Where the live memory of an attempt of a worker is."""
    return task_dir / "live" / f"{worker}-{attempt}.json"


def command_live_name(stem: str) -> str:
    """The live memory of a plain command's attempt, in its task's ``logs/`` folder, written by
    whatever started the command (a backend's launcher) beside the attempt's log ``stem.log``."""
    return f"{stem}.live.json"


def units_done(task_dir: Path) -> int:
    """The number of distinct units in ``task_dir/progress.jsonl``; 0 without the file.

    A unit computed twice (a stale worker that was only slow) counts once.
    """
    try:
        data = (task_dir / "progress.jsonl").read_bytes()
    except FileNotFoundError:
        return 0
    return len(set(PROGRESS_UNIT.findall(data)))


def harness_started() -> float:
    """When the harness started, set in ``HARNESS_STARTED`` by its first call.

    The variable survives the restart after the install of the sources, so the start is the
    one before the install.
    """
    value = os.environ.get(HARNESS_STARTED)
    if value:
        try:
            return float(value)
        except ValueError:
            pass
    started = time.time()
    os.environ[HARNESS_STARTED] = repr(started)
    return started


def cpu_seconds() -> float:
    """The user and system seconds of this process and of its ended children."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def own_cpu_seconds() -> float:
    """The user and system seconds of this process alone (a pool's units count by unit)."""
    times = os.times()
    return times.user + times.system


def node_name() -> str:
    """The node a worker runs on: ``SIMRUN_NODE``/``NODE_NAME`` if set, else the host name."""
    for name in NODE_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return socket.gethostname()
