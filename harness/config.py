"""What a pod is told: the ``SIMRUN_*`` environment and ``task.json``, read once.

``SIMRUN_TASK_DIR=<store>/runs/<run>/tasks/<task>`` holds ``task.json`` (type, settings, plan,
inputs) written by the service; everything else comes from the environment. Each reader raises
``ConfigurationError`` (exit 4) with a message that names the variable or field at fault.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness import cgroups
from harness.errors import ConfigurationError
from harness.memory import GIB, memory_source

GRACE_S = 30.0
"""The grace period of a pod: seconds from its SIGTERM to its SIGKILL (the backends' too)."""
STOP_MARGIN_S = 5.0
"""What the harness keeps of the grace period to release its claims and write its report."""
UNIT_GRACE_S = GRACE_S - STOP_MARGIN_S
"""Seconds the running units (or simrun-exec's command) get after SIGTERM by default."""
STALE_MARGIN_S = 60.0
"""The default stale threshold is the grace period plus this."""

TASK_DIR_ENV = "SIMRUN_TASK_DIR"
INPUTS_ENV = "SIMRUN_INPUTS"
SCRATCH_ENV = "SIMRUN_SCRATCH"
STORE_ENV = "SIMRUN_STORE"
WORKER_ENV = "SIMRUN_WORKER"
ROLE_ENV = "SIMRUN_ROLE"
ATTEMPT_ENV = "SIMRUN_ATTEMPT"
EDITABLE_ENV = "SIMRUN_EDITABLE"
CORES_ENV = "SIMRUN_CORES"
MEMORY_LIMIT_ENV = "SIMRUN_MEMORY_LIMIT_GB"
STALE_ENV = "SIMRUN_STALE_S"
GRACE_ENV = "SIMRUN_GRACE_S"
OUT_ENV = "SIMRUN_OUT"
UNIT_TIME_LIMIT_ENV = "SIMRUN_UNIT_TIME_LIMIT_S"
DEFAULT_SCRATCH = "/scratch"
WORKER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
PORT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Role = Literal["base", "extra"]


@dataclass(frozen=True)
class TaskPaths:
    """The locations of a task: its directory in the store, its inputs, its scratch."""

    task_dir: Path
    store: Path | None
    """The root of the run store, ``task_dir.parents[3]`` (or ``SIMRUN_STORE``)."""
    inputs: Mapping[str, Path] = field(default_factory=dict)
    """The directory of every input port in the store, by port."""
    scratch: Path = Path(DEFAULT_SCRATCH)

    @property
    def ledger(self) -> Path:
        return self.task_dir / "units"

    @property
    def progress(self) -> Path:
        return self.task_dir / "progress.jsonl"

    @property
    def out(self) -> Path:
        return self.task_dir / "out"

    @property
    def task_json(self) -> Path:
        return self.task_dir / "task.json"


def _store_of(task_dir: Path, env: Mapping[str, str]) -> Path | None:
    if env.get(STORE_ENV):
        return Path(env[STORE_ENV]).absolute()
    parents = task_dir.parents
    if len(parents) > 3 and parents[0].name == "tasks" and parents[2].name == "runs":
        return parents[3]
    return None


def paths_from_env(env: Mapping[str, str]) -> TaskPaths:
    """The locations of a task from the environment of its pod.

    The task directory is ``SIMRUN_TASK_DIR``, the store the directory three levels above it
    (``<store>/runs/<run>/tasks/<task>``), the inputs ``port=path`` pairs of ``SIMRUN_INPUTS``
    (a relative path is relative to the store), the scratch directory ``SIMRUN_SCRATCH``
    (default ``/scratch``).
    """
    if not env.get(TASK_DIR_ENV):
        raise ConfigurationError(f"{TASK_DIR_ENV} is not set")
    task_dir = Path(env[TASK_DIR_ENV]).absolute()
    store = _store_of(task_dir, env)
    inputs: dict[str, Path] = {}
    for pair in filter(None, (p.strip() for p in env.get(INPUTS_ENV, "").split(","))):
        port, equals, path = pair.partition("=")
        if not equals or not PORT.match(port) or not path:
            raise ConfigurationError(f"{INPUTS_ENV}: {pair!r} is not port=path")
        if Path(path).is_absolute():
            inputs[port] = Path(path)
        elif store is None:
            raise ConfigurationError(
                f"{INPUTS_ENV}: {pair!r} is relative, but {task_dir} is not in a store "
                f"(<store>/runs/<run>/tasks/<task>) and {STORE_ENV} is not set"
            )
        else:
            inputs[port] = store / path
    scratch = Path(env.get(SCRATCH_ENV) or DEFAULT_SCRATCH).absolute()
    return TaskPaths(task_dir=task_dir, store=store, inputs=inputs, scratch=scratch)


@dataclass(frozen=True)
class TaskFile:
    """``task.json``: what the harness reads besides its environment."""

    task: str
    type: str
    settings: Mapping[str, Any]
    plan: Mapping[str, Any]
    run: str = ""

    def plan_gb(self, name: str) -> float:
        """A GiB figure of the plan (``base_gb``, ``per_worker_gb``)."""
        value = self.plan.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigurationError(f"task.json: plan.{name} is {value!r}, not a number ≥ 0")
        return float(value)

    @property
    def coordinator_merges(self) -> bool:
        return bool(self.plan.get("coordinator_merges", False))


def read_task(paths: TaskPaths) -> TaskFile:
    """Read ``task.json`` of the task directory."""
    try:
        data = json.loads(paths.task_json.read_text())
    except FileNotFoundError:
        raise ConfigurationError(f"{paths.task_json} does not exist") from None
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"{paths.task_json} cannot be read: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ConfigurationError(f"{paths.task_json} has no task type")
    settings, plan = data.get("settings") or {}, data.get("plan") or {}
    if not isinstance(settings, dict) or not isinstance(plan, dict):
        raise ConfigurationError(f"{paths.task_json}: settings and plan must be objects")
    return TaskFile(
        task=str(data.get("task") or paths.task_dir.name),
        type=data["type"],
        settings=settings,
        plan=plan,
        run=str(data.get("run") or ""),
    )


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigurationError(f"{name}={text!r}: expected a positive integer")
    return int(text)


def _positive_float(env: Mapping[str, str], name: str) -> float | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name}={text!r}: expected a positive number")
    return value


def cores(env: Mapping[str, str]) -> int:
    """The cores of a worker: the quota of its cgroup, else the CPUs of the process.

    ``SIMRUN_CORES`` caps them, e.g. the cores of the plan of a task on the local backend,
    which has no cgroup per task.
    """
    cap = _positive_int(env, CORES_ENV)
    cgroup = cgroups.find("cpu")
    available = (cgroup.quota_cores() if cgroup is not None else None) or len(
        os.sched_getaffinity(0)
    )
    return min(available, cap) if cap is not None else available


def memory_limit(env: Mapping[str, str]) -> int | None:
    """The memory limit of a worker in bytes: the one of its cgroup.

    Without a limit of the cgroup, or with the memory of the process tree
    (``SIMRUN_MEMORY_SOURCE=process``, whose cgroup is not the worker's), it is
    ``SIMRUN_MEMORY_LIMIT_GB``, the memory of the plan; None without either.
    """
    source = memory_source(env)
    gb = _positive_float(env, MEMORY_LIMIT_ENV)
    if source == "cgroup":
        cgroup = cgroups.find("memory")
        limit = cgroup.limit_bytes() if cgroup is not None else None
        if limit is not None:
            return limit
    return None if gb is None else int(gb * GIB)


def attempt(env: Mapping[str, str]) -> int:
    """``SIMRUN_ATTEMPT``, the attempt of the pod (0 by default)."""
    text = env.get(ATTEMPT_ENV, "").strip() or "0"
    if not text.isdigit():
        raise ConfigurationError(f"{ATTEMPT_ENV}={text!r}: expected an integer ≥ 0")
    return int(text)


def role(env: Mapping[str, str]) -> Role:
    """``SIMRUN_ROLE``: ``base`` (the coordinator) or ``extra`` (the default)."""
    value = env.get(ROLE_ENV, "").strip() or "extra"
    if value == "base":
        return "base"
    if value == "extra":
        return "extra"
    raise ConfigurationError(f"{ROLE_ENV}={value!r}: expected base or extra")


def worker_id(env: Mapping[str, str], task: str, role: Role) -> str:
    """``SIMRUN_WORKER``; the coordinator defaults to ``<task>-w0``, an extra worker has none."""
    value = env.get(WORKER_ENV, "").strip()
    if not value and role == "base":
        value = f"{task}-w0"
    if not value:
        raise ConfigurationError(f"{WORKER_ENV} is not set (an extra worker needs its own id)")
    if not WORKER_ID.match(value):
        raise ConfigurationError(f"{WORKER_ENV}={value!r} is not a valid worker id")
    return value


def grace_s(env: Mapping[str, str]) -> float:
    """``SIMRUN_GRACE_S``: what running units get after SIGTERM, ``UNIT_GRACE_S`` by default."""
    return _positive_float(env, GRACE_ENV) or UNIT_GRACE_S


def stale_s(env: Mapping[str, str], grace: float) -> float:
    """``SIMRUN_STALE_S``: when another worker's heartbeat is stale, grace + 60 by default."""
    return _positive_float(env, STALE_ENV) or grace + STALE_MARGIN_S


def unit_time_limit_s(env: Mapping[str, str]) -> float | None:
    """``SIMRUN_UNIT_TIME_LIMIT_S``: a unit running longer fails; None (no limit) by default."""
    return _positive_float(env, UNIT_TIME_LIMIT_ENV)
