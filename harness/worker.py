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
import os
import subprocess
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack

from pydantic import BaseModel

from harness import config
from harness.config import (
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
from harness.lifecycle import configure_logging, note_retry_memory, sigterm_stops
from harness.memory import Evidence, MemorySampler, MemorySource, memory_source, processes
from harness.merge import merge_exit
from harness.report import (
    WorkerReport,
    harness_started,
    live_path,
    node_name,
    own_cpu_seconds,
    write_report,
)
from harness.sources import install_sources, needs_restart
from harness.tasktypes import TaskType, get_task_type
from harness.work_loop import Tally, run_pool

__all__ = ["main", "run_worker"]

HEARTBEAT_S = 2.0
"""Seconds between two heartbeats (fewer when ``stale_s`` is short)."""
COORDINATOR_POLL_S = 1.0
"""Seconds between two looks of a waiting coordinator at the ledger and the heartbeats."""

log = logging.getLogger("simrun.harness")


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
    evidence, sampler, tally = Evidence(memory_source), MemorySampler(memory_source), Tally()
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
            run_pool(
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
