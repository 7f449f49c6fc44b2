"""The launcher of one process of the local backend: starts it detached and records its end.

The step of the backend writes ``<node>-<attempt>.launch`` (what to run, its environment, its
cgroups) in the task's ``logs/`` folder (the service's own, ``harness.untrusted.service_dir``)
and starts ``python launcher.py LAUNCH_FD LOGS_FD`` in a session of its own with its
output into ``<node>-<attempt>.log``: the launch file and the folder are inherited descriptors,
so no command line in ``ps`` names a run, and every file the launcher writes there is made
relative to the folder's descriptor, never through a link a task planted. The launcher
prepares what the process needs (the venv of the run, its inputs, staged as the task user),
starts it in a session and process group of its own (and in its memory and pids cgroups, as
its task user), writes ``<node>-<attempt>.pid`` naming it, waits for its end and writes
``<node>-<attempt>.exit`` (exit code, signal, kills of the out of memory killer, times,
whether simrun stopped it), then removes the pid file and wakes the step. The launcher is the
subreaper of the process's tree and reaps each orphan as it exits: a SIGTERM from the backend
goes to every descendant, and whatever the process leaves running (a ``setsid`` child too) is
killed at its end, with or without cgroups. So no process of the service owns a run: any
process reads the state from these files, and a run survives a restart of the service.

It runs as a script, not as a module of ``runs``, so that it starts in milliseconds without
the service's packages: its siblings are imported from its directory by their bare names
(``launch_file``, the contract with the step; ``prepare``, what it does before the process
runs; ``plain_command``, what it writes for a plain command; ``pids``, ``wake``, ``cgroups``,
``env``, ``shm`` and ``budget``; ``launcher_server`` when it is started ahead, as
``launcher.py SOCKET_FD``, to fork a launcher per launch), and it uses nothing else of the
service (only the standard library and the harness's stdlib modules). Nothing of the service
imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pids
from launch_file import STARTING_EXIT, Launch, load
from plain_command import LiveSampler, report
from prepare import prepare, start
from wake import notify

from harness import untrusted
from harness.errors import EXIT_STORAGE, EXIT_TERMINATED, STORAGE_ERRNOS
from harness.report import command_live_name

SERVICE_FILE_CAP = 1 << 20
"""The most the launcher reads of its launch file."""


def last_line(logs_fd: int, name: str, size: int = 4096) -> str:
    """The last line of a log that is not empty (as a pod's termination message on error)."""
    try:
        with untrusted.open_regular(logs_fd, name) as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
            lines = handle.read(size).decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip()[:300] for line in reversed(lines) if line.strip()), "")


def _exit_code(returncode: int) -> tuple[int, int | None]:
    """The exit code as a shell reports it (128 + signal) and the signal that ended it."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def _docker(*args: str) -> str:
    """The output of a docker command; empty when it fails."""
    try:
        done = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _unstarted_exit(error: BaseException, stopped: bool) -> int:
    """The exit code of a process that could not be started: 143 stopped on SIGTERM, 75 when
    a disk failed under its staging or scratch (the store's fault, retried, as the harness
    exits), else 4."""
    if stopped:
        return EXIT_TERMINATED
    if getattr(error, "errno", None) in STORAGE_ERRNOS:
        return EXIT_STORAGE
    return int(STARTING_EXIT)  # a sibling: untyped to mypy


def _capture(launch: Launch) -> Any:
    """Send what the launcher and its process print (stdout and stderr, the venv's build too)
    through a pipe into the log, capped (``logcap``); the pump, to stop at the end."""
    from harness import logcap

    read, write = os.pipe()
    pump = logcap.LogPump(read, sys.stdout.fileno(), launch.log_bytes)
    log = os.dup(sys.stdout.fileno())
    os.set_inheritable(log, False)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    pump.start()

    dropped: list[int] = []

    def stop() -> int:
        """Point stdout and stderr at the log again and drain the pipe (once); the bytes the
        log dropped."""
        if not dropped:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            dropped.append(int(pump.stop()))
        return dropped[0]

    return stop


def _watch(launch: Launch) -> Any:
    """The watch of the task's budget of files (``local_budget``), None without a budget."""
    import budget as local_budget  # the sibling module, see the docstring of this module

    budget = local_budget.Budget.from_json(dataclasses.asdict(launch.budget))
    store, task = launch.store, tuple(untrusted.parts_of(launch.task))
    scratch = launch.cwd
    siblings = frozenset(launch.siblings)
    user = launch.user_budget
    ledger = local_budget.Ledger.from_json(dataclasses.asdict(user)) if user else None

    def count() -> str | None:
        usage = local_budget.measure(budget, store, task, scratch, siblings)
        over: str | None = local_budget.exceeded(budget, usage)
        if over is None and ledger is not None:
            over = ledger.over(usage)
        return over

    return local_budget.Watch(
        budget,
        count=count,
        kill=lambda: pids.signal_tree(signal.SIGKILL),
        done=ledger.leave if ledger is not None else None,
    )


def _over_budget(launch: Launch, result: dict[str, Any], over: str) -> None:
    """Fail an attempt over its budget of files, naming it, and remove what it wrote."""
    import budget as local_budget  # the sibling module, see the docstring of this module

    task = tuple(untrusted.parts_of(launch.task))
    local_budget.remove_written(launch.store, task, frozenset(launch.siblings))
    result["over_budget"] = over
    result["message"] = f"{over}; what it wrote was removed"


def run(launch_fd: int, logs_fd: int) -> int:
    """Run the process of a launch file to its end and record it beside it, in the folder of
    ``logs_fd``; returns its exit code."""
    with os.fdopen(launch_fd, "rb") as handle:
        launch = load(handle.read(SERVICE_FILE_CAP))
    stop_capture = _capture(launch) if launch.log_bytes else None
    try:
        return _run(launch, logs_fd, stop_capture)
    finally:
        if stop_capture is not None:
            stop_capture()


def _run(launch: Launch, logs_fd: int, stop_capture: Any) -> int:
    stem = launch.name
    pid_name, exit_name, log_name = f"{stem}.pid", f"{stem}.exit", f"{stem}.log"

    def record(name: str, data: Any) -> None:
        untrusted.write_atomic_at(logs_fd, name, json.dumps(data))

    started = time.time()
    result: dict[str, Any] = {
        "started": started,
        "signal": None,
        "oom_kills": 0,
        "message": "",
        "stopped_by_simrun": False,
    }

    stopping = False

    def stop(signum: int, frame: object) -> None:
        # Only the backend signals the launcher (a cancel or a stop): the whole tree of the
        # process gets the SIGTERM, wherever its session; one not started yet never starts.
        nonlocal stopping
        stopping = True
        result["stopped_by_simrun"] = True
        pids.signal_tree(signal.SIGTERM)

    pids.become_subreaper()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    me = os.getpid()
    names = {
        "launcher": me,
        "launcher_start": pids.process_start(me),
        "launcher_cmdline": pids.process_cmdline(me),
        "container": launch.container,
    }
    record(pid_name, names)
    # Made before any isolation: an abstract address is looked up in its socket's namespace.
    waker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    held = None
    try:
        held = prepare(launch, lambda: stopping)
        if stopping:
            raise InterruptedError("stopped on SIGTERM before it started")
        child = start(launch)
    except Exception as error:  # noqa: BLE001 - any failure to start is the process's end
        print(f"simrun: the process could not be started: {error}", flush=True)
        stopped = stopping or isinstance(error, InterruptedError)
        result.update(
            exit_code=_unstarted_exit(error, stopped),
            signal=signal.SIGTERM.value if stopped else None,
            message="" if stopped else f"could not be started: {error}",
        )
    else:
        pid = child.pid
        names.update(
            pid=pid,
            start=pids.process_start(pid),
            cmdline=pids.process_cmdline(pid),
            started=time.time(),
        )
        record(pid_name, names)
        if launch.notify:  # it runs from now on: the step tells the service at once
            notify(launch.notify, waker)
        if stopping:  # a SIGTERM came while it started, before the backend could know it
            os.killpg(pid, signal.SIGTERM)
        sampler = None
        if launch.live:
            sampler = LiveSampler(logs_fd, command_live_name(stem), pid, launch.cgroup)
            sampler.start()
        watch = _watch(launch)
        if watch is not None:
            watch.start()
        child.returncode = pids.wait_reaping(pid)
        if sampler is not None:
            sampler.stop()
        over = watch.stop() if watch is not None else None
        result["exit_code"], result["signal"] = _exit_code(child.returncode)
        if result["signal"] == signal.SIGXFSZ and watch is not None:
            over = over or watch.budget.too_large_a_file()
        if launch.report:
            report(launch, result)
        _clean_up(launch, child.pid, result)
        if over is not None:
            _over_budget(launch, result, over)
        if stop_capture is not None:
            result["log_dropped"] = stop_capture()
        if result["exit_code"] != 0:
            result["last_line"] = last_line(logs_fd, log_name)
    if held is not None:
        held.close()  # the packages' venv is no longer in use by this process
    result["ended"] = time.time()
    record(exit_name, result)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pid_name, dir_fd=logs_fd)
    if launch.notify:
        notify(launch.notify, waker)
    waker.close()
    return int(result["exit_code"])


def _clean_up(launch: Launch, pid: int, result: dict[str, Any]) -> None:
    """Kill what the process left (its group and every descendant), read the OOM evidence,
    remove the cgroup."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    pids.end_tree()
    scratch = launch.cwd  # the scratch goes with the process, however deep
    untrusted.remove_tree(scratch.parent, [scratch.name])
    if launch.cgroup:
        import cgroups  # the sibling module, see the docstring of this module

        result["oom_kills"] = cgroups.oom_kills(launch.cgroup)
        cgroups.remove(launch.cgroup)
    if launch.pids_cgroup:
        import cgroups

        cgroups.remove(launch.pids_cgroup)
    if container := launch.container:
        if _docker("inspect", "--format", "{{.State.OOMKilled}}", container) == "true":
            result["oom_kills"] = 1
        _docker("rm", "--force", container)


def serve(socket_fd: int) -> int:
    """Be the launcher started ahead (``launcher_server``): what a launcher imports only when
    it needs it is imported now, once, and every launch handed on ``socket_fd`` runs ``run``
    in a child of its own."""
    import budget  # noqa: F401 - the sibling modules, imported ahead
    import builds  # noqa: F401
    import cgroups  # noqa: F401
    import env  # noqa: F401 - with harness.venvs: importlib.metadata, half a launch's time
    import launcher_server
    import shm  # noqa: F401

    from harness import cgroups as harness_cgroups  # noqa: F401
    from harness import logcap, sources  # noqa: F401

    return int(launcher_server.serve(socket_fd, run))  # a sibling: untyped to mypy


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2) or not all(a.isdigit() for a in args):
        print("usage: launcher.py LAUNCH_FD LOGS_FD | launcher.py SOCKET_FD", file=sys.stderr)
        return 2
    if len(args) == 1:
        return serve(int(args[0]))
    return run(int(args[0]), int(args[1]))


if __name__ == "__main__":
    raise SystemExit(main())
