"""What runs in the pool processes of a worker: the setup once, then batches of units.

A pool process ignores SIGTERM (the worker decides when its units stop) and checks a shared
stop flag between units, so a batch ends at the next unit boundary after a stop or a failure.
"""

from __future__ import annotations

import signal
import time
import traceback
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel

from harness.tasktypes import TaskType


class Flag(Protocol):
    """A shared byte (``multiprocessing.RawValue("b")``): cheap to read between units."""

    value: int


class Batch(NamedTuple):
    """What a batch of units gave: the results and seconds of the units computed, in order."""

    units: list[int]
    results: list[Any]
    seconds: list[float]
    cpu_seconds: float
    failed: tuple[int, str] | None
    """The unit that raised and its traceback."""


class _Process:
    task_type: TaskType
    settings: BaseModel
    stop: Flag
    context: Any = None
    ready = False


def initialize(task_type: TaskType, settings: BaseModel, stop: Flag) -> None:
    """The initializer of a pool process."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _Process.task_type, _Process.settings, _Process.stop = task_type, settings, stop
    _Process.context, _Process.ready = None, False


def compute_batch(ranges: Sequence[range]) -> Batch:
    """Compute units in order until done, stopped or failed; the setup in the first unit."""
    task_type, settings, stop = _Process.task_type, _Process.settings, _Process.stop
    compute = task_type.compute
    assert compute is not None
    units: list[int] = []
    results: list[Any] = []
    seconds: list[float] = []
    failed = None
    cpu = time.process_time()
    for unit in (u for r in ranges for u in r):
        if stop.value:
            break
        began = time.perf_counter()
        try:
            if not _Process.ready:
                if task_type.setup is not None:
                    _Process.context = task_type.setup(settings)
                _Process.ready = True
            result = compute(settings, _Process.context, unit)
        except Exception:
            failed = (unit, traceback.format_exc())
            break
        seconds.append(time.perf_counter() - began)
        units.append(unit)
        results.append(result)
    return Batch(units, results, seconds, time.process_time() - cpu, failed)


def warm_up() -> None:
    """A no-op, to start the processes of the pool before the worker starts its threads."""
