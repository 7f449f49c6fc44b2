"""simrun-worker: a pod of a split task computes units of its ledger in a process pool.

The worker claims blocks of units and computes them in a pool of ``processes(...)``
processes (the setup of the task type once in each), which store the results in the ledger
and a line per unit in ``progress.jsonl`` within ``pool.FLUSH_S`` of each unit's end: a
SIGKILL of any of them loses the units in flight and at most that much finished work. The
coordinator (``SIMRUN_ROLE=base``, ``<task>-w0``) also waits until the ledger is complete,
releasing the claims of workers whose heartbeat went stale, and merges when its plan says so.
A pod is evicted with SIGTERM, killed after its grace period and restarted with the same
worker id, which releases its earlier incarnation's claims.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import subprocess
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel

from harness import config, pool
from harness.config import (
    GRACE_S,
    STALE_MARGIN_S,
    UNIT_GRACE_S,
    WORKER_ID,
    TaskPaths,
    cores,
    memory_limit,
    paths_from_env,
)
from harness.errors import (
    EXIT_CONFIGURATION,
    EXIT_FAILED,
    EXIT_KILLED,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_TERMINATED,
    ConfigurationError,
    StorageError,
    Terminated,
    UnitError,
)
from harness.execute import THREAD_VARIABLES
from harness.execute import main as exec_main
from harness.heartbeat import Heartbeat
from harness.ledger import Claim, Ledger
from harness.lifecycle import configure_logging, kill_tree, note_retry_memory, sigterm_stops
from harness.memory import (
    MEMORY_SOURCE_ENV,
    Evidence,
    MemorySampler,
    MemorySource,
    memory_source,
    process_tree_anon,
    processes,
)
from harness.merge import MERGED_MARKER, merge_exit, run_merge
from harness.merge import main as merge_main
from harness.report import (
    WorkerReport,
    cpu_seconds,
    harness_started,
    live_path,
    node_name,
    own_cpu_seconds,
    write_report,
)
from harness.sources import (
    install_editable,
    install_sources,
    needs_restart,
    restart,
    shadow_tree,
    stage,
)
from harness.tasktypes import TaskType, get_task_type

__all__ = [
    "ConfigurationError",
    "GRACE_S",
    "HEARTBEAT_S",
    "COORDINATOR_POLL_S",
    "MEMORY_SOURCE_ENV",
    "MERGED_MARKER",
    "UNIT_GRACE_S",
    "MemorySampler",
    "TaskPaths",
    "Terminated",
    "UnitError",
    "WorkerReport",
    "cores",
    "cpu_seconds",
    "exec_main",
    "harness_started",
    "install_editable",
    "install_sources",
    "main",
    "memory_limit",
    "memory_source",
    "merge_main",
    "paths_from_env",
    "process_tree_anon",
    "processes",
    "restart",
    "run_merge",
    "run_worker",
    "shadow_tree",
    "stage",
    "write_report",
]

HEARTBEAT_S = 2.0
"""Seconds between two heartbeats (fewer when ``stale_s`` is short)."""
COORDINATOR_POLL_S = 1.0
"""Seconds between two looks of a waiting coordinator at the ledger and the heartbeats."""
BATCH_S = 0.2
"""The seconds a batch of units should take: long enough that the per-batch work (claims,
the pool's round trip) is a small fraction of it, short enough that the last batches spread
over the processes."""
TICK_S = 0.25
"""The longest the worker waits for its pool before it looks at SIGTERM again."""
ANSWER_S = 5.0
"""How long the worker waits for the answers of batches whose processes ended."""
SETTLE_POLL_S = 0.02
"""How often a stopping worker looks whether its pool processes stored their last batch."""

log = logging.getLogger("simrun.harness")


@dataclass
class _Tally:
    """What the worker computed so far."""

    units: list[int] = field(default_factory=list)
    unit_seconds: float = 0.0
    unit_cpu_seconds: float = 0.0
    children_peak_bytes: int = 0
    """The largest peak of a program a pool process ran (a sweep's units)."""


class _Work:
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
        tally: _Tally,
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
        """Blocks for the next batch: about ``BATCH_S`` of units, fewer near the end."""
        if self.unit_s is None:
            return 1
        wanted = int(BATCH_S / max(self.unit_s, 1e-7)) // self.ledger.block
        pending = self.ledger.pending_count()
        return max(1, min(wanted, pending // (2 * self.processes)))

    def _fill(self) -> None:
        while len(self.in_flight) < self.processes:
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
            self._fail(unit, trace.strip().splitlines()[-1] if trace.strip() else "")

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


def _run(
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
    tally: _Tally,
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
            _Work(
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


def run_worker(
    task_type: TaskType,
    settings: BaseModel,
    paths: TaskPaths,
    worker: str,
    *,
    cores: int,
    memory_bytes: int | None,
    base_gb: float,
    per_worker_gb: float,
    grace_s: float = UNIT_GRACE_S,
    attempt: int = 0,
    stop: threading.Event | None = None,
    heartbeat_s: float = HEARTBEAT_S,
    coordinator: bool = False,
    stale_s: float | None = None,
    poll_s: float = COORDINATOR_POLL_S,
    memory_source: MemorySource = "cgroup",
    unit_time_limit_s: float | None = None,
) -> WorkerReport:
    """Compute units of the ledger of a task until none is pending.

    Releases the claims of an earlier incarnation of ``worker``, creates the ledger, keeps
    ``processes(...)`` batches of units in flight in a pool whose processes run the setup of
    the task type once and store each unit's result and its ``progress.jsonl`` line within
    ``pool.FLUSH_S`` of its end. The heartbeat is touched every ``heartbeat_s`` from start to
    end. A coordinator does not return when nothing is pending: until the ledger is complete
    it releases, every ``poll_s``, the claims of workers whose heartbeat did not change for
    ``stale_s`` (``grace_s + 60`` by default) and computes them. On SIGTERM (``stop`` set, also
    before the first claim) it stops claiming, waits up to ``grace_s`` for the running units
    and releases the rest. A unit running longer than ``unit_time_limit_s`` is killed with its
    process and fails. The report ``workers/<worker>-<attempt>.json`` is written in every case
    but an invalid worker id (and a store that cannot take it).

    Raises ``ValueError`` (not splittable, too little memory for one process, an invalid
    worker id, a ledger of another size), ``UnitError`` (a unit failed; it was released),
    ``BrokenProcessPool`` (a pool process died, e.g. killed for memory), ``StorageError`` (the
    store failed; the claims were released), ``Terminated``.
    """
    if not WORKER_ID.match(worker):  # the report is named by it: none for a bad one
        raise ValueError(f"{worker!r} is not a valid worker id")
    stale = grace_s + STALE_MARGIN_S if stale_s is None else stale_s
    started = harness_started()
    began, clock = time.time(), time.perf_counter()
    cpu_before = own_cpu_seconds()
    evidence, sampler, tally = Evidence(memory_source), MemorySampler(memory_source), _Tally()
    report = WorkerReport(
        worker=worker,
        node=node_name(),
        processes=0,
        memory_limit_bytes=memory_bytes,
        per_worker_gb=per_worker_gb,
        started=started,
        prepare_seconds=max(0.0, began - started),
        completed=False,
    )
    try:
        if not task_type.splittable or task_type.units is None:
            raise ValueError(f"task type {task_type.name!r} is not splittable")
        size = processes(cores, memory_bytes, base_gb, per_worker_gb)
        units = task_type.units(settings)
        report.processes = size = max(1, min(size, units))
        with ExitStack() as stack:
            if stop is None:  # no caller handles SIGTERM: handle it here, while the work runs
                stop = stack.enter_context(sigterm_stops())
            _run(
                task_type,
                settings,
                paths,
                worker,
                size=size,
                units=units,
                stop=stop,
                grace_s=grace_s,
                unit_time_limit_s=unit_time_limit_s,
                heartbeat_s=heartbeat_s,
                coordinator=coordinator,
                stale_s=stale,
                poll_s=poll_s,
                sampler=sampler,
                tally=tally,
                live=live_path(paths.task_dir, worker, attempt),
            )
        report.completed = True
    except UnitError:
        report.failed = True
        raise
    except OSError as error:  # opening the ledger, before the work
        raise StorageError(f"the store failed: {error}") from error
    finally:
        sampler.sample()
        report.units_done = sorted(set(tally.units))
        report.unit_seconds = tally.unit_seconds
        report.seconds = time.perf_counter() - clock
        report.peak_memory_bytes, report.peak_source = sampler.high_water()
        if memory_source == "process" and report.peak_memory_bytes is not None:
            # The process tree's samples miss programs that ended between two of them: each
            # pool process may have held the largest of them besides its own memory.
            report.peak_memory_bytes += report.processes * tally.children_peak_bytes
        report.oom_kills = evidence.oom_kills()
        report.cpu_seconds = own_cpu_seconds() - cpu_before + tally.unit_cpu_seconds
        report.throttled_seconds = evidence.throttled_seconds()
        try:
            write_report(report, paths.task_dir, attempt)
        except OSError as error:
            log.error("the report cannot be written: %s", error)
    return report


def _work(stop: threading.Event) -> int:
    """Read the configuration, run the worker (and the coordinator's merge); the exit code."""
    env = os.environ
    try:
        paths = paths_from_env(env)
        task = config.read_task(paths)
        role = config.role(env)
        worker = config.worker_id(env, task.task, role)
        task_type = get_task_type(task.type)
        settings = task_type.settings_or_error(task.settings)
        if not task_type.splittable:
            raise ConfigurationError(f"task type {task.type!r} is not splittable: use simrun-exec")
        grace = config.grace_s(env)
        stale = config.stale_s(env, grace)
        coordinator = role == "base"
        log.info("%s (%s) of %s: %s", worker, role, task.task, task.type)
        run_worker(
            task_type,
            settings,
            paths,
            worker,
            cores=cores(env),
            memory_bytes=memory_limit(env),
            base_gb=task.plan_gb("base_gb"),
            per_worker_gb=task.plan_gb("per_worker_gb"),
            grace_s=grace,
            attempt=config.attempt(env),
            stop=stop,
            heartbeat_s=min(HEARTBEAT_S, stale / 4),
            coordinator=coordinator,
            stale_s=stale,
            poll_s=min(COORDINATOR_POLL_S, stale / 4),
            memory_source=memory_source(env),
            unit_time_limit_s=config.unit_time_limit_s(env),
        )
    except (ConfigurationError, ValueError) as error:
        log.error("configuration error: %s", error)
        return EXIT_CONFIGURATION
    except UnitError as error:
        log.error("%s", error)
        return EXIT_FAILED
    except BrokenProcessPool:
        log.error("a process of the pool died (killed for its memory?)")
        return EXIT_KILLED
    except StorageError as error:
        log.error("%s: the claims were released; retried", error)
        return EXIT_STORAGE
    except Terminated:
        log.info("stopped on SIGTERM")
        return EXIT_TERMINATED
    if coordinator and task.coordinator_merges:
        if stop.is_set():
            return EXIT_TERMINATED
        return merge_exit(task_type, settings, paths)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run simrun-worker in a pod of a split task; returns its exit code.

    SIGTERM is handled from the start, so a pod evicted while it prepares stops before its
    first claim. Exit codes: 0 done, 3 a unit failed (logged and released), 4 a configuration
    error, 75 the store failed (retried), 137 a process of the pool died (retried with more
    memory), 143 stopped on SIGTERM.
    """
    with sigterm_stops() as stop:
        harness_started()
        note_retry_memory(os.environ)
        argparse.ArgumentParser(
            prog="simrun-worker",
            description="Compute units of the split task of SIMRUN_TASK_DIR (see docs).",
        ).parse_args(argv)
        configure_logging("simrun-worker")
        for name in THREAD_VARIABLES:
            os.environ[name] = "1"  # one thread per pool process: the pool has the cores
        try:
            install_sources(os.environ, stop)
        except (OSError, subprocess.CalledProcessError) as error:
            log.error("the sources cannot be installed: %s", error)
            return EXIT_CONFIGURATION
        if stop.is_set() and needs_restart(os.environ):
            return EXIT_TERMINATED  # the install was stopped: its imports are not to be trusted
        return _work(stop)


if __name__ == "__main__":
    raise SystemExit(main())
