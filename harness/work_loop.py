"""The claim-compute loop of a worker: batches of ledger units in flight in a process pool.

``run_pool`` opens the ledger, forks the pool (the setup of the task type once in each
process) and keeps batches of claimed units in flight until nothing is pending (a
coordinator: until the ledger is complete, releasing the claims of workers whose heartbeat
went stale). On SIGTERM, a failed unit, a broken pool or a failing store it lets the running
units end within the grace period, kills what is left and releases the claims in flight.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel

from harness import pool
from harness.config import TaskPaths
from harness.errors import StorageError, Terminated, UnitError
from harness.heartbeat import Heartbeat
from harness.ledger import Claim, Ledger
from harness.lifecycle import kill_tree
from harness.memory import MemorySampler
from harness.tasktypes import TaskType

BATCH_S = 0.2
"""The seconds a batch of units should take: long enough that the per-batch work (claims,
the pool's round trip) is a small fraction of it, short enough that the last batches spread
over the processes."""
QUEUED = 2
"""Batches in flight per pool process once its units are known to be short: the one it
computes and the next, waiting in the pool's queue, so a process that ends a batch starts the
next at once instead of waiting for this worker to wake, collect, release and claim (on a busy
machine, tens of milliseconds a batch). Units longer than ``BATCH_S`` get one batch per
process: a queued batch of them would hold claims another worker's idle process could take."""
TICK_S = 0.25
"""The longest the worker waits for its pool before it looks at SIGTERM again."""
ANSWER_S = 5.0
"""How long the worker waits for the answers of batches whose processes ended."""
SETTLE_POLL_S = 0.02
"""How often a stopping worker looks whether its pool processes stored their last batch."""

log = logging.getLogger("simrun.harness")


OWN_EXCEPTION = re.compile(r"^harness\.[\w.]+: ")
"""The qualified name the harness's own exceptions print with: no news to the reader."""


def exception_line(trace: str) -> str:
    """The last line of a traceback (the exception), without the module path of one of the
    harness's own exceptions (``harness.sweep.ProgramFailed: ``): its message says it all."""
    lines = trace.strip().splitlines()
    return OWN_EXCEPTION.sub("", lines[-1]) if lines else ""


@dataclass
class Tally:
    """What the worker computed so far."""

    units: list[int] = field(default_factory=list)
    unit_seconds: float = 0.0
    unit_cpu_seconds: float = 0.0
    children_peak_bytes: int = 0
    """The largest peak of a program a pool process ran (a sweep's units)."""


class WorkLoop:
    """The claim-compute loop of one worker over one pool; the pool processes store units."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        executor: ProcessPoolExecutor,
        flag: pool.Flag,
        slots: Any,
        processes: int,
        stop: threading.Event,
        grace_s: float,
        unit_time_limit_s: float | None,
        coordinator: bool,
        stale_s: float,
        poll_s: float,
        tally: Tally,
    ) -> None:
        self.ledger, self.executor, self.flag, self.slots = ledger, executor, flag, slots
        self.processes, self.stop, self.grace_s = processes, stop, grace_s
        self.unit_time_limit_s = unit_time_limit_s
        self.coordinator, self.stale_s, self.poll_s = coordinator, stale_s, poll_s
        self.tally = tally
        self.in_flight: dict[Future[pool.Batch], list[Claim]] = {}
        self.failed: int | None = None
        self.failure = ""
        self.storage: str | None = None
        self.unit_s: float | None = None
        """Seconds of a unit in the latest batch: a process's setup weighs on its first only."""
        self.next_look = time.monotonic() + poll_s

    def run(self) -> None:
        """Compute until nothing is pending (the coordinator: until the ledger is complete).

        Raises ``UnitError``, ``StorageError``, ``BrokenProcessPool`` or ``Terminated`` once
        the batches in flight ended and their claims were released.
        """
        try:
            self._loop()
        except OSError as error:  # of the ledger, in this process
            self._end(f"{error}")
            raise StorageError(f"the store failed: {error}") from error

    def _loop(self) -> None:
        while True:
            if self.stop.is_set():
                self._stop()
            if self.failed is None and self.storage is None:
                self._fill()
            if self.coordinator and time.monotonic() >= self.next_look:
                self._release_stale()
            if not self.in_flight:
                if self.failed is not None:
                    raise UnitError(self.failed, self.failure)
                if self.storage is not None:
                    raise StorageError(f"the store failed: {self.storage}")
                if not self.coordinator or self.ledger.is_complete():
                    return
                self.stop.wait(max(0.0, self.next_look - time.monotonic()))
                continue
            done, _ = wait(self.in_flight, timeout=TICK_S, return_when=FIRST_COMPLETED)
            for future in done:
                self._collect(future)
            self._enforce_time_limit()

    def _batch_blocks(self) -> int:
        """Blocks for the next batch: about ``BATCH_S`` of units, and near the end a share of
        the pending blocks this worker does not hold yet, so its last batches shrink and its
        processes end together (the blocks in flight, counted too, would make every batch
        claimed at the end a full one, and one process would compute its last alone)."""
        if self.unit_s is None:
            return 1
        wanted = int(BATCH_S / max(self.unit_s, 1e-7)) // self.ledger.block
        held = sum(len(claims) for claims in self.in_flight.values())
        free = self.ledger.pending_count() - held
        return max(1, min(wanted, free // (QUEUED * self.processes)))

    def _fill(self) -> None:
        short = self.unit_s is not None and self.unit_s < BATCH_S
        while len(self.in_flight) < (QUEUED if short else 1) * self.processes:
            claims = self.ledger.claim(self._batch_blocks())
            if not claims:
                return
            ranges = [r for claim in claims for r in claim.ranges]
            try:
                future = self.executor.submit(pool.compute_batch, ranges)
            except BrokenProcessPool:  # a process died since the last answer: as for an answer
                self.ledger.release([c.block for c in claims])
                self._broken()
            self.in_flight[future] = claims

    def _collect(self, future: Future[pool.Batch]) -> None:
        claims = self.in_flight.pop(future)
        try:
            batch = future.result()
        except BrokenProcessPool:
            self.in_flight[future] = claims
            self._broken()
            return
        except BaseException:  # the batch's answer could not be sent back
            first = claims[0].ranges[0].start
            log.exception("the batch from unit %d failed", first)
            batch = pool.Batch([], [], 0.0, (first, "the batch failed"))
        self._record(batch, claims)

    def _record(self, batch: pool.Batch, claims: list[Claim]) -> None:
        if batch.units:
            self.tally.units.extend(batch.units)
            self.tally.unit_seconds += sum(batch.seconds)
            self.unit_s = sum(batch.seconds) / len(batch.seconds)
        self.tally.unit_cpu_seconds += batch.cpu_seconds
        self.tally.children_peak_bytes = max(
            self.tally.children_peak_bytes, batch.children_peak_bytes
        )
        self.ledger.release([c.block for c in claims])
        if batch.storage is not None and self.storage is None and self.failed is None:
            log.error("the units cannot be stored: %s", batch.storage)
            self.storage = batch.storage
            self.flag.value = 1
        if batch.failed is not None and self.failed is None and self.storage is None:
            unit, trace = batch.failed
            log.error("unit %d failed; released:\n%s", unit, trace)
            # The exception's own line, for the last line of the log: the task's message.
            self._fail(unit, exception_line(trace))

    def _fail(self, unit: int, reason: str) -> None:
        self.failed, self.failure = unit, reason
        self.flag.value = 1  # the other batches end at their next unit

    def _enforce_time_limit(self) -> None:
        """Kill the process of a unit that ran past the time limit: the unit failed."""
        limit = self.unit_time_limit_s
        if limit is None or self.failed is not None:
            return
        now = time.monotonic()
        for slot in range(0, len(self.slots), pool.SLOT):
            pid, unit, since = self.slots[slot : slot + pool.SLOT]
            if since and now - since > limit:
                reason = f"it ran longer than its time limit of {limit:g} s"
                log.error("unit %d failed: %s; its process is killed", unit, reason)
                self._fail(int(unit), reason)
                kill_tree(int(pid))  # with the program a sweep's unit runs

    def _broken(self) -> NoReturn:
        """A pool process died: let the others store what they finished, release, raise.

        A process the time limit killed fails its unit instead of breaking the pool.
        """
        self._end("a process of the pool died")
        if self.failed is not None:
            raise UnitError(self.failed, self.failure)
        raise BrokenProcessPool("a process of the pool died")

    def _end(self, why: str) -> None:
        """Stop the batches: ``grace_s`` to end at a unit, then killed; claims released.

        The units a batch that ended without an answer (killed, the pool broken) stored
        before count as done by this worker: they are in the ledger.
        """
        self.flag.value = 1
        # Before Python 3.14 a pool has no public way to its processes; shutdown forgets them.
        processes = list((getattr(self.executor, "_processes", None) or {}).values())
        self.executor.shutdown(wait=False, cancel_futures=True)  # the processes end after it
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and not self._settled(processes):
            time.sleep(SETTLE_POLL_S)
        if any(process.is_alive() for process in processes):
            log.info("%s: what is left of the pool is killed", why)
            for process in processes:
                kill_tree(process.pid)
            for process in processes:
                process.join(ANSWER_S)
        wait(self.in_flight, timeout=ANSWER_S)
        in_flight, self.in_flight = self.in_flight, {}
        lost: list[Claim] = []
        try:
            for future, claims in in_flight.items():
                try:
                    batch = future.result(timeout=0)
                except BaseException:
                    lost += claims
                    continue
                self._record(batch, claims)
            self.ledger.refresh()
            self.tally.units.extend(self.ledger.covered([r for c in lost for r in c.ranges]))
            self.ledger.release([c.block for c in lost])
        except OSError as error:
            log.error("claims cannot be released: %s", error)

    def _settled(self, processes: list[Any]) -> bool:
        """Whether every pool process ended or stored its last batch: one that waits for
        another batch may wait for ever on a queue lock a killed process held, so the pool
        waits no longer for it than for its units in flight."""
        alive = {process.pid for process in processes if process.is_alive()}
        for slot in range(0, len(self.slots), pool.SLOT):
            pid, unit = self.slots[slot], self.slots[slot + 1]
            if pid in alive and unit != pool.BETWEEN_BATCHES:
                return False
        return True

    def _release_stale(self) -> None:
        mine = {c.block for claims in self.in_flight.values() for c in claims}
        released = self.ledger.release_stale(self.stale_s, mine)
        if released:
            log.info("released %d stale claims: blocks %s", len(released), released[:20])
        self.next_look = time.monotonic() + self.poll_s

    def _stop(self) -> None:
        """Stop claiming, give the running units ``grace_s``, release the rest; raises."""
        log.info("SIGTERM: waiting up to %.0f s for %d batches", self.grace_s, len(self.in_flight))
        self._end("SIGTERM")
        if self.failed is not None:
            raise UnitError(self.failed, self.failure)
        if self.storage is not None:
            raise StorageError(f"the store failed: {self.storage}")
        raise Terminated()


def run_pool(
    task_type: TaskType,
    settings: BaseModel,
    paths: TaskPaths,
    worker: str,
    *,
    size: int,
    units: int,
    stop: threading.Event,
    grace_s: float,
    unit_time_limit_s: float | None,
    heartbeat_s: float,
    coordinator: bool,
    stale_s: float,
    poll_s: float,
    sampler: MemorySampler,
    tally: Tally,
    live: Path,
) -> None:
    """Open the ledger, start the pool and the heartbeat, and work until done."""
    ledger = Ledger.open(paths.ledger, units, worker)
    released = ledger.release_incarnation()
    if released:
        log.info("released %d claims of an earlier %s", len(released), worker)
    ledger.heartbeat(0)
    if stop.is_set():
        raise Terminated()
    context = multiprocessing.get_context("fork")
    flag: pool.Flag = context.RawValue("b", 0)
    slots = context.RawArray("d", size * pool.SLOT)
    store = pool.Store(paths.ledger / "done", paths.progress, worker)
    executor = ProcessPoolExecutor(
        size,
        mp_context=context,
        initializer=pool.initialize,
        initargs=(task_type, settings, flag, store, slots, context.Value("i", 0)),
    )
    try:
        executor.submit(pool.warm_up).result()  # fork before any thread of ours runs
        with Heartbeat(sampler, ledger.heartbeat, heartbeat_s, live=live):
            WorkLoop(
                ledger=ledger,
                executor=executor,
                flag=flag,
                slots=slots,
                processes=size,
                stop=stop,
                grace_s=grace_s,
                unit_time_limit_s=unit_time_limit_s,
                coordinator=coordinator,
                stale_s=stale_s,
                poll_s=poll_s,
                tally=tally,
            ).run()
    finally:
        close_pool(executor)


def close_pool(executor: ProcessPoolExecutor) -> None:
    """Shut a pool down without ever waiting on it for ever: ``shutdown(wait=True)`` of a
    pool one of whose processes died can hang (a process left waiting on a queue lock the
    dead one held, a manager thread waiting for it), so what is left is killed after
    ``ANSWER_S`` and the manager thread is given as long to end."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    manager = getattr(executor, "_executor_manager_thread", None)
    executor.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + ANSWER_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            kill_tree(process.pid)
            process.join(ANSWER_S)
    if manager is not None:
        manager.join(ANSWER_S)
        if manager.is_alive():
            log.warning("the pool's manager thread did not end; the worker ends without it")
