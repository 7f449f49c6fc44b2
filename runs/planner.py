"""The planner: a task's cores, memory and workers from its spec, its type and observations.

Pure functions, no database and no I/O: the caller passes the observations it read. A task's
memory is ``base_gb + processes × per_worker_gb``; ``per_worker_gb`` comes from the spec if
given, else from the observations of its type (a high quantile of the peak per process with a
margin), else the type's default. The retry memory, for the one retry after a kill for
memory, is larger: at least ``RETRY_FACTOR`` times, more when observed kills say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from harness.tasktypes import TaskType
from runs.spec import RunSpec, TaskSpec

MIN_OBSERVATIONS = 3
"""Fewer observations than this do not override the type's default."""
QUANTILE = 0.95
MARGIN = 1.25
RETRY_FACTOR = 2.0
DEFAULT_SPLIT_CORES = 2
DEFAULT_UNSPLIT_CORES = 1
DEFAULT_COMMAND_GB = 1.0
MIN_PER_WORKER_GB = 0.05
GB_STEP = 0.05
"""Memory is rounded up to this step, so plans read well and pods get tidy limits."""


class TaskPlan(BaseModel):
    """The resources of one task, decided at submission and stored with it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cores: int = Field(ge=1)
    memory_gb: float = Field(gt=0, description="per pod")
    workers: int = Field(default=1, ge=1, description="pods of a split task, coordinator included")
    base_gb: float = Field(ge=0)
    per_worker_gb: float = Field(gt=0)
    processes: int = Field(default=1, ge=1, description="pool processes per pod")
    retry_memory_gb: float = Field(gt=0, description="per pod, after a kill for memory")
    coordinator_merges: bool = False
    why: str = ""


@dataclass(frozen=True)
class ObservedPeak:
    """One observation as the planner needs it: peak GiB per process, and whether it was a kill."""

    gb_per_process: float
    oom: bool = False


def round_gb(gb: float) -> float:
    """Round up to the memory step."""
    return round(math.ceil(gb / GB_STEP - 1e-9) * GB_STEP, 2)


def processes(cores: int, memory_gb: float | None, base_gb: float, per_worker_gb: float) -> int:
    """``min(cores, floor((memory − base) / per_worker))``, at least 1: the harness's formula."""
    if memory_gb is None:
        return max(1, cores)
    fit = math.floor((memory_gb - base_gb) / per_worker_gb + 1e-9)
    return max(1, min(cores, fit))


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of values by linear interpolation (values not empty)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def per_worker_memory(
    task: TaskSpec, task_type: TaskType | None, observed: Sequence[ObservedPeak]
) -> tuple[float, str]:
    """The GiB per process and where they came from."""
    if task.memory is not None and task.memory.per_worker_gb is not None:
        return task.memory.per_worker_gb, "per-worker memory from the spec"
    peaks = [o.gb_per_process for o in observed if not o.oom]
    if task_type is not None and len(peaks) >= MIN_OBSERVATIONS:
        peak = quantile(peaks, QUANTILE)
        gb = max(MIN_PER_WORKER_GB, round_gb(peak * MARGIN))
        return gb, (
            f"per-worker memory from {len(peaks)} observations of {task_type.name}: "
            f"p{round(QUANTILE * 100)} {peak:.3f} GiB × {MARGIN} margin"
        )
    if task_type is not None:
        note = f" ({len(peaks)} observations, {MIN_OBSERVATIONS} needed)" if peaks else ""
        return task_type.per_worker_gb, f"per-worker memory: default of {task_type.name}{note}"
    return DEFAULT_COMMAND_GB, "memory: default of a command task"


def retry_memory(
    memory_gb: float, base_gb: float, procs: int, observed: Sequence[ObservedPeak]
) -> tuple[float, str]:
    """The memory of the retry after a kill: a factor more, more when kills were seen above."""
    by_factor = memory_gb * RETRY_FACTOR
    killed = [o.gb_per_process for o in observed if o.oom]
    if killed:
        by_kills = base_gb + procs * max(killed) * RETRY_FACTOR
        if by_kills > by_factor:
            return round_gb(by_kills), (
                f"retry memory from {len(killed)} OOM kills: {RETRY_FACTOR}× the largest"
            )
    return round_gb(by_factor), f"retry memory {RETRY_FACTOR}× the memory"


def plan_task(
    task: TaskSpec,
    task_type: TaskType | None,
    observed: Sequence[ObservedPeak] = (),
    *,
    extra_workers: bool = True,
    max_cores: int | None = None,
    max_memory_gb: float | None = None,
) -> TaskPlan:
    """Plan one task.

    ``task_type`` is None for a command task; ``observed`` are the observations of its type,
    newest first; ``extra_workers`` is False on a backend that runs one pod per split task
    (then the coordinator merges); ``max_cores``/``max_memory_gb`` are the largest node's.
    """
    split = task_type is not None and task_type.splittable
    why: list[str] = []
    cores = task.cores or (DEFAULT_SPLIT_CORES if split else DEFAULT_UNSPLIT_CORES)
    if max_cores is not None and cores > max_cores:
        why.append(f"cores capped from {cores} to {max_cores}, the largest node")
        cores = max_cores
    per_worker_gb, source = per_worker_memory(task, task_type, observed)
    why.append(source)
    if task_type is None:
        base_gb = 0.0 if task.memory is None or task.memory.base_gb is None else task.memory.base_gb
    elif task.memory is not None and task.memory.base_gb is not None:
        base_gb = task.memory.base_gb
    else:
        base_gb = task_type.base_gb
    pool = cores if split else 1
    if task.memory is not None and task.memory.gb is not None:
        memory_gb = task.memory.gb
        procs = processes(pool, memory_gb, base_gb, per_worker_gb)
        why.append(f"memory {memory_gb} GiB from the spec")
    elif task_type is None:
        memory_gb, procs = per_worker_gb + base_gb, 1
    else:
        procs = pool
        memory_gb = round_gb(base_gb + procs * per_worker_gb)
    if max_memory_gb is not None and memory_gb > max_memory_gb:
        why.append(f"memory capped from {memory_gb} to {max_memory_gb} GiB, the largest node")
        memory_gb = max_memory_gb
        procs = processes(pool, memory_gb, base_gb, per_worker_gb)
    retry_gb, retry_why = retry_memory(memory_gb, base_gb, procs, observed)
    if max_memory_gb is not None and retry_gb > max_memory_gb:
        retry_gb = max(memory_gb, max_memory_gb)
        retry_why += f", capped at {retry_gb} GiB, the largest node"
    why.append(retry_why)
    workers = (task.workers or 1) if split else 1
    if split and not extra_workers and workers > 1:
        why.append(f"{workers} workers asked; this backend runs one pod per split task")
        workers = 1
    return TaskPlan(
        cores=cores,
        memory_gb=memory_gb,
        workers=workers,
        base_gb=base_gb,
        per_worker_gb=per_worker_gb,
        processes=procs,
        retry_memory_gb=retry_gb,
        coordinator_merges=split and not extra_workers,
        why="; ".join(why),
    )


def plan_run(
    spec: RunSpec,
    *,
    types: Mapping[str, TaskType],
    observed: Mapping[str, Sequence[ObservedPeak]] | None = None,
    extra_workers: bool = True,
    max_cores: int | None = None,
    max_memory_gb: float | None = None,
) -> dict[str, TaskPlan]:
    """The plan of every task of a validated spec, by task id."""
    return {
        task_id: plan_task(
            task,
            types[task.type] if task.type else None,
            (observed or {}).get(task.type or "", ()),
            extra_workers=extra_workers,
            max_cores=max_cores,
            max_memory_gb=max_memory_gb,
        )
        for task_id, task in spec.tasks.items()
    }
