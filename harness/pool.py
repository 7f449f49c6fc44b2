"""What runs in the pool processes of a worker: the setup once, then batches of units.

A pool process stores the units it computed itself: every ``FLUSH_S`` (and at the end of a
batch) it writes their piece to the ledger, their lines to ``progress.jsonl`` (and their rows to
``rows.jsonl`` where the task type gives them), from a thread of its own while a long unit runs,
so a SIGKILL of the process or of its worker loses at most the unit in flight and ``FLUSH_S`` of
finished work. It ignores SIGTERM (the worker decides when its units stop), dies with its
worker, and checks a shared stop flag between units, so a batch ends at the next unit boundary
after a stop or a failure. It marks the unit it runs and since when in its slot of a shared
array, where the worker finds a unit past its time limit and the process to kill. A unit may end
its batch without a result: ``Interrupted`` (the stop reached the program it ran) leaves it to
be computed again, ``Killed`` (its program was killed, by the OOM killer as a rule) kills the
pool process once it stored its finished units, so the worker ends as for any pool process
killed (137, retried with the retry memory after a kill for memory).
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import resource
import signal
import threading
import time
import traceback
from array import array
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel

from harness.pieces import store_pieces
from harness.progress import append_lines, append_progress
from harness.report import UNIT_ROWS
from harness.tasktypes import TaskType

FLUSH_S = 0.5
"""The most seconds of finished units a pool process keeps before it stores them: the work a
SIGKILL may lose besides the unit in flight."""
SLOT = 3
"""Numbers per process in the shared slots: its pid, its unit (``BETWEEN_BATCHES`` once its
batch is stored), since when (0 when no unit runs)."""
BETWEEN_BATCHES = -1.0
"""The unit of a process whose last batch is stored: it waits for the next one, and may wait
for ever on a queue lock that a killed process of the pool held."""
_PR_SET_PDEATHSIG = 1


class Interrupted(Exception):
    """A unit the stop of its worker interrupted: neither stored nor failed, computed again."""


class Killed(Exception):
    """A unit whose work was killed (its program by SIGKILL): its pool process dies too."""


class Flag(Protocol):
    """A shared byte (``multiprocessing.RawValue("b")``): cheap to read between units."""

    value: int


class Counter(Protocol):
    """A shared integer with a lock (``multiprocessing.Value("i")``): hands out the slots."""

    value: int

    def get_lock(self) -> Any: ...


class Store(NamedTuple):
    """Where the units of a worker are stored."""

    done: Path
    """The ledger's ``done/``."""
    progress: Path
    worker: str


class Batch(NamedTuple):
    """What a batch of units gave: the units stored, in order, and how it ended."""

    units: list[int]
    seconds: list[float]
    cpu_seconds: float
    failed: tuple[int, str] | None
    """The unit that raised (or exited) and its traceback."""
    storage: str | None = None
    """Why the units could not be stored (an ``OSError``): the batch stopped there."""
    children_peak_bytes: int = 0
    """The largest peak resident memory of a program the process ran and reaped (a sweep's)."""


class _Process:
    task_type: TaskType
    settings: BaseModel
    stop: Flag
    store: Store
    slots: Any = None
    slot = 0
    context: Any = None
    ready = False


def _die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the worker dies (Linux; else nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return


def initialize(
    task_type: TaskType, settings: BaseModel, stop: Flag, store: Store, slots: Any, taken: Counter
) -> None:
    """The initializer of a pool process: signals, the task, its slot."""
    parent = os.getppid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    if os.getppid() != parent:  # the worker died before the request was in place
        os._exit(1)
    _Process.task_type, _Process.settings, _Process.stop = task_type, settings, stop
    _Process.store, _Process.slots = store, slots
    _Process.context, _Process.ready = None, False
    with taken.get_lock():
        _Process.slot, taken.value = taken.value, taken.value + 1
    slots[_Process.slot * SLOT] = os.getpid()
    slots[_Process.slot * SLOT + 1] = BETWEEN_BATCHES
    bind(_Process.slot, len(slots) // SLOT)


def bind(slot: int, processes: int) -> None:
    """Keep this pool process, and the programs it starts, on a CPU of its own when the pool
    has one process for each CPU it may use (as MPI and Slurm bind a rank to a core).

    Unbound, the kernel placed a program on the idle CPU and woke its pool process, when it
    ended, on the CPU where it ran before, behind another process's program, while the CPU of
    its own stayed idle (``docs/sweeps.md``). With fewer processes than CPUs nothing is bound:
    the CPUs may be shared with other tasks, whose pools would be bound to the same ones."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) != processes:
        return
    try:
        os.sched_setaffinity(0, {cpus[slot]})
    except OSError:  # the CPU left the task's set meanwhile: run unbound
        return


class Described(NamedTuple):
    """What a unit's result says of it beyond its piece: its row and why it failed."""

    rows: list[bytes]
    failures: list[str | None]


def describe_unit(unit: int, result: Any) -> tuple[bytes | None, str | None]:
    """A unit's line of ``rows.jsonl`` and why it failed, as its task type gives them
    (``TaskType.row`` and ``failure``; None where it gives none): what the store writes."""
    task_type, settings = _Process.task_type, _Process.settings
    line = None
    if task_type.row is not None:
        row = {"unit": unit, "row": dict(task_type.row(settings, unit, result))}
        line = json.dumps(row, allow_nan=True).encode() + b"\n"
    why = task_type.failure(settings, unit, result) if task_type.failure is not None else None
    return line, why


class Unstored:
    """The units a pool process computed and has not stored yet, shared by the batch's loop
    and a thread that stores them once they are ``FLUSH_S`` old: the loop stores after a
    unit, and a long unit after short ones would otherwise keep those from the store (and
    from the service) for its whole length. Every change is made holding ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.units: array[int] = array("q")
        self.payloads: list[bytes] = []
        self.seconds: array[float] = array("d")
        self.described = Described([], [])
        self.stored: array[int] = array("q")
        self.stored_seconds: array[float] = array("d")
        self.flushed = time.monotonic()
        self.storage: str | None = None
        """Why the units could not be stored (an ``OSError``): nothing more is stored."""

    def store(self, now: float) -> None:
        """Store the units computed since the last store (their piece, their progress lines,
        their rows); those of a write that failed are not counted as stored."""
        if not self.units or self.storage is not None:
            return
        store = _Process.store
        try:
            store_pieces(store.done, self.units, self.payloads)
            if self.described.rows:
                append_lines(store.progress.with_name(UNIT_ROWS), b"".join(self.described.rows))
            append_progress(
                store.progress, store.worker, self.units, self.seconds, self.described.failures
            )
        except OSError as error:
            self.storage = str(error)
            return
        self.stored += self.units
        self.stored_seconds += self.seconds
        for kept in (self.units, self.payloads, self.seconds):
            del kept[:]
        del self.described.rows[:], self.described.failures[:]
        self.flushed = now

    def store_until(self, done: threading.Event) -> None:
        """Until ``done`` is set (a thread's loop): store what is ``FLUSH_S`` old."""
        while not done.wait(FLUSH_S / 2):
            with self.lock:
                now = time.monotonic()
                if now - self.flushed >= FLUSH_S:
                    self.store(now)


def compute_batch(ranges: Sequence[range]) -> Batch:
    """Compute units in order until done, stopped or failed, storing them within
    ``FLUSH_S`` of their end (``Unstored``).

    The setup runs in the first unit of the process. Anything a unit raises, ``SystemExit``
    (a command line's ``main``) included, fails it, but ``Interrupted`` (the batch ends
    without the unit) and ``Killed`` (the process stores its units and kills itself).
    """
    task_type, settings, stop = _Process.task_type, _Process.settings, _Process.stop
    compute = task_type.compute
    assert compute is not None
    describes = task_type.row is not None or task_type.failure is not None
    slots, at = _Process.slots, _Process.slot * SLOT
    # The units' numbers are kept in arrays, not lists: thousands of int and float objects
    # kept alive until their store made the units themselves slower (by a few per cent for
    # the pure-Python units of 0.1 ms of bench/harness_throughput.py).
    unstored = Unstored()
    units, payloads, seconds = unstored.units, unstored.payloads, unstored.seconds
    described, lock = unstored.described, unstored.lock
    failed = None
    done = threading.Event()
    storer = threading.Thread(target=unstored.store_until, args=(done,), daemon=True)
    storer.start()
    # Local names for what every unit calls: at 0.1 ms a unit, lookups are a visible share.
    dumps, protocol, monotonic = pickle.dumps, pickle.HIGHEST_PROTOCOL, time.monotonic
    cpu = time.process_time()
    try:
        for unit in chain.from_iterable(ranges):
            if stop.value or unstored.storage is not None:
                break
            began = monotonic()  # one clock for the slot and the unit's seconds
            slots[at + 1], slots[at + 2] = unit, began
            try:
                if not _Process.ready:
                    if task_type.setup is not None:
                        _Process.context = task_type.setup(settings)
                    _Process.ready = True
                result = compute(settings, _Process.context, unit)
                payload = dumps(result, protocol)
                if describes:
                    line, why = describe_unit(unit, result)
            except Interrupted:
                break
            except Killed:
                with lock:
                    unstored.store(monotonic())
                os.kill(os.getpid(), signal.SIGKILL)
            except BaseException:
                failed = (unit, traceback.format_exc())
                break
            finally:
                slots[at + 2] = 0.0
            ended = monotonic()
            with lock:
                if describes:
                    if line is not None:
                        described.rows.append(line)
                    described.failures.append(why)
                units.append(unit)
                payloads.append(payload)
                seconds.append(ended - began)
                if ended - unstored.flushed >= FLUSH_S:
                    unstored.store(ended)
    finally:
        done.set()
        storer.join()
    unstored.store(monotonic())
    slots[at + 1] = BETWEEN_BATCHES
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    spent = time.process_time() - cpu
    return Batch(
        unstored.stored.tolist(),
        unstored.stored_seconds.tolist(),
        spent,
        failed,
        unstored.storage,
        children,
    )


def stopping() -> bool:
    """Whether the worker of this pool process stops (its flag is set): for a unit to ask."""
    flag = getattr(_Process, "stop", None)  # None outside a pool (the merge's recompute)
    return flag is not None and bool(flag.value)


def warm_up() -> None:
    """A no-op, to start the processes of the pool before the worker starts its threads."""
