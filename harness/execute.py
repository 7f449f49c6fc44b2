"""simrun-exec: run the command of an unsplit plugin task and report what it used.

``simrun-exec <command...>`` installs the snapshots (``SIMRUN_EDITABLE``), stages every input
port's directory into ``<scratch>/inputs/<port>``, and runs the command as its child with the
scratch directory as its working directory, ``SIMRUN_OUT=<task dir>/out`` (created) and the
thread variables of BLAS and OpenMP set to 1. A SIGTERM is passed on to the command, which is
killed after the grace period. The report ``workers/<worker>-<attempt>.json`` (the worker is
``SIMRUN_WORKER``, else the task id) is written in every case once the command started.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from harness import config
from harness.config import OUT_ENV, TaskFile, TaskPaths
from harness.errors import (
    EXIT_CONFIGURATION,
    EXIT_FAILED,
    EXIT_KILLED,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_TERMINATED,
    STORAGE_ERRNOS,
    ConfigurationError,
)
from harness.heartbeat import Heartbeat
from harness.lifecycle import configure_logging, kill_tree, note_retry_memory, sigterm_stops
from harness.memory import Evidence, MemorySampler, MemorySource, memory_source
from harness.report import (
    WorkerReport,
    cpu_seconds,
    harness_started,
    live_path,
    node_name,
    write_report,
)
from harness.sources import StagingStorageError, install_sources, stage

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)
"""Set to 1 for the command: a task's cores are its processes, not BLAS threads."""
INPUTS_DIR = "inputs"
"""Where the ports are staged below the scratch directory: ``inputs/<port>``."""
PYTHON = ("python", "python3")
"""A command starting with one of these runs in the harness's interpreter."""
TICK_S = 0.1
USAGE = "usage: simrun-exec [--] <command> [args...]"

log = logging.getLogger("simrun.harness")


def stage_inputs(paths: TaskPaths) -> None:
    """Copy each input port's directory to ``<scratch>/inputs/<port>``."""
    paths.scratch.mkdir(parents=True, exist_ok=True)
    pairs = [(str(path), f"{INPUTS_DIR}/{port}") for port, path in paths.inputs.items()]
    stage(pairs, paths.store or paths.task_dir, paths.scratch)


def run_command(
    command: Sequence[str],
    paths: TaskPaths,
    worker: str,
    *,
    env: Mapping[str, str],
    stop: threading.Event,
    grace_s: float = config.UNIT_GRACE_S,
    attempt: int = 0,
    memory_source: MemorySource = "cgroup",
    memory_bytes: int | None = None,
    per_worker_gb: float = 0.0,
) -> int:
    """Run the command as a child, pass SIGTERM on, write the report; the exit code.

    0 done, 3 the command failed, 4 it cannot be started, 75 the store failed, 137 it was
    killed (or exited 137), 143 stopped on SIGTERM, whatever the command returned after it.
    """
    started = harness_started()
    began, clock = time.time(), time.perf_counter()
    evidence, sampler = Evidence(memory_source), MemorySampler(memory_source)
    try:
        paths.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        log.error("the store failed: %s; retried", error)
        return EXIT_STORAGE
    child_env = {**env, **dict.fromkeys(THREAD_VARIABLES, "1"), OUT_ENV: str(paths.out)}
    argv = [sys.executable, *command[1:]] if command[0] in PYTHON else list(command)
    try:
        process = subprocess.Popen(argv, cwd=paths.scratch, env=child_env)
    except OSError as error:
        log.error("the command %s cannot be started: %s", argv[0], error)
        return EXIT_CONFIGURATION
    log.info("started %s (pid %d)", " ".join(argv), process.pid)
    deadline: float | None = None
    with Heartbeat(sampler, live=live_path(paths.task_dir, worker, attempt)):
        while True:
            try:
                code = process.wait(timeout=TICK_S)
                break
            except subprocess.TimeoutExpired:
                pass
            if stop.is_set() and deadline is None:
                log.info("SIGTERM: passed on; the command has %.0f s", grace_s)
                process.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + grace_s
            if deadline is not None and time.monotonic() >= deadline:
                log.info("grace period over: killing the command")
                kill_tree(process.pid)
    if stop.is_set():  # an evicted command that exits 0 (a checkpoint) has not finished
        status = EXIT_TERMINATED
    elif code == 0:
        status = EXIT_OK
    elif code in (-signal.SIGKILL, EXIT_KILLED):
        status = EXIT_KILLED
    else:
        status = EXIT_FAILED
    report = WorkerReport(
        worker=worker,
        node=node_name(),
        processes=1,
        seconds=time.perf_counter() - clock,
        memory_limit_bytes=memory_bytes,
        per_worker_gb=per_worker_gb,
        oom_kills=evidence.oom_kills(),
        failed=status == EXIT_FAILED,
        completed=status == EXIT_OK,
        started=started,
        prepare_seconds=max(0.0, began - started),
        cpu_seconds=cpu_seconds(),
        throttled_seconds=evidence.throttled_seconds(),
    )
    report.peak_memory_bytes, report.peak_source = sampler.high_water()
    try:
        write_report(report, paths.task_dir, attempt)
    except OSError as error:
        log.error("the report cannot be written: %s", error)
    log.info("the command exited %s: exit %d", code, status)
    return status


def _task_file(paths: TaskPaths) -> TaskFile | None:
    """``task.json`` if the service wrote one (a plugin task has one; a bare test may not)."""
    return config.read_task(paths) if paths.task_json.exists() else None


def main(argv: list[str] | None = None) -> int:
    """Run ``simrun-exec <command...>``, the command of an unsplit plugin task.

    Exit codes: 0 done, 3 the command failed, 4 a configuration error (also a command which
    cannot be started), 75 the store failed (retried), 137 the command was killed (by the OOM
    killer, retried with more memory) or exited 137, 143 stopped on SIGTERM (retried), whatever
    the command returned after it.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    with sigterm_stops() as stop:
        harness_started()
        note_retry_memory(os.environ)
        configure_logging("simrun-exec")
        if not args or args[0] in ("-h", "--help"):
            print(USAGE, file=sys.stderr)
            return EXIT_OK if args else EXIT_CONFIGURATION
        env = os.environ
        try:
            install_sources(env, stop)
            if stop.is_set():
                return EXIT_TERMINATED
            paths = config.paths_from_env(env)
            task = _task_file(paths)
            worker = env.get(config.WORKER_ENV, "").strip() or (
                task.task if task is not None else paths.task_dir.name
            )
            per_worker_gb = task.plan_gb("per_worker_gb") if task and task.plan else 0.0
            grace, attempt = config.grace_s(env), config.attempt(env)
            source, limit = memory_source(env), config.memory_limit(env)
        except (ConfigurationError, OSError, subprocess.CalledProcessError) as error:
            log.error("configuration error: %s", error)
            return EXIT_CONFIGURATION
        try:
            stage_inputs(paths)
        except (StagingStorageError, OSError) as error:
            if error.errno in STORAGE_ERRNOS:
                log.error("the store failed while the inputs were staged: %s", error)
                return EXIT_STORAGE
            log.error("configuration error: %s", error)
            return EXIT_CONFIGURATION
        if stop.is_set():
            return EXIT_TERMINATED
        return run_command(
            args,
            paths,
            worker,
            env=env,
            stop=stop,
            grace_s=grace,
            attempt=attempt,
            memory_source=source,
            memory_bytes=limit,
            per_worker_gb=per_worker_gb,
        )


if __name__ == "__main__":
    raise SystemExit(main())
