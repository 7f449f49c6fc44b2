"""The processes of the local backend's attempts, as their pid files name them: whether one
still runs, signalling one with its tree, and killing what a service before left running.

A pid file (``<node>-<attempt>.pid`` in the task's ``logs/``) names the launcher and, once it
started it, the process, each with its start time and command line (``pids.same_process``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import untrusted
from runs.backends.base import workflow_name
from runs.backends.local import cgroups, submissions
from runs.backends.local.pids import process_start, same_process
from runs.backends.local.state import logs_parts, read_service_json

if TYPE_CHECKING:
    from runs.backends.local.backend import LocalBackend


def launcher_alive(names: dict[str, Any]) -> bool:
    """Whether the launcher of a pid file still runs: the same pid, start time, command line."""
    pid = names.get("launcher")
    return pid is not None and same_process(
        pid, names.get("launcher_start"), names.get("launcher_cmdline")
    )


def process_alive(names: dict[str, Any]) -> bool:
    """Whether the process of a pid file still runs: the same pid, start time and command line.

    A process whose launcher still runs needs only its start time (a pid is not reused before
    the launcher reaped it, and the process may have replaced its command line with an exec).
    """
    pid = names.get("pid")
    if pid is None:
        return False
    if launcher_alive(names):
        start = names.get("start")
        return start is not None and process_start(pid) == start
    return same_process(pid, names.get("start"), names.get("cmdline"))


def signal_process(names: dict[str, Any], signum: int) -> bool:
    """Signal the process of a pid file with its descendants (and its container); whether one
    was.

    A SIGTERM goes to the launcher, which passes it to every descendant of the process (a
    ``setsid`` child too) and records that simrun sent it; a SIGKILL to the process's group,
    after which the launcher kills what is left. An attempt whose launcher has not started its
    process yet: a SIGTERM keeps the launcher from starting it, a SIGKILL kills its group.
    """
    if container := names.get("container"):
        kill = ["docker", "kill", "--signal", signal.Signals(signum).name, container]
        subprocess.run(kill, capture_output=True, timeout=30, check=False)
    if signum == signal.SIGTERM and launcher_alive(names):
        os.kill(names["launcher"], signum)
        return True
    if "pid" in names:
        if not process_alive(names):
            return False
        os.killpg(names["pid"], signum)
        return True
    if launcher_alive(names):
        if signum == signal.SIGTERM:
            os.kill(names["launcher"], signum)
        else:
            os.killpg(names["launcher"], signum)
        return True
    return False


def kill_orphans(backend: LocalBackend) -> int:
    """Kill the processes of ended or unknown runs which a service before left running.

    A process group is killed (and its container) only while its leader is still the
    process of the pid file: the same start time and command line, so a reused pid is never
    killed. The pid files are removed; so are the empty cgroups of ended processes.
    Returns the process groups killed.
    """
    killed = 0
    with submissions.step_lock(backend.state, blocking=True):
        ours = set()
        for run in untrusted.list_dir(backend.store, ["runs"]):
            if not run.is_dir or submissions.is_live(backend.state, workflow_name(run.name)):
                continue  # its processes are adopted
            ours.add(run.name)
            for task in untrusted.list_dir(backend.store, ["runs", run.name, "tasks"]):
                killed += kill_left(backend.store, run.name, task.name)
        parents = [backend.pids_parent]
        if backend.hierarchy is not None:
            parents.append(backend.hierarchy.parent)
        for parent in parents:
            if parent is None or not parent.is_dir():
                continue
            # The parent is the machine's, shared by every service on it: only the cgroups
            # of this store's ended runs go, never another service's (made by its step, not
            # yet joined by its launcher: empty, so removing it failed that launch).
            for cgroup in parent.iterdir():  # named <run>.<node>.<attempt>.<store's tag>
                run_id = cgroup.name.partition(".")[0]
                mine = cgroup.name.endswith(f".{backend.cgroup_tag}")
                if mine and run_id in ours and cgroup.is_dir() and not cgroups.pids(cgroup):
                    cgroups.remove(cgroup, timeout_s=0)
    return killed


def kill_left(store: Path, run: str, task: str) -> int:
    """Kill what the pid files of a task's ``logs/`` name, and remove them; only the
    service's own files of the service's own folder count, walked without links."""
    try:
        logs = untrusted.own_dir(store, logs_parts(run, task))
    except OSError:
        return 0
    killed = 0
    try:
        for entry in untrusted.entries(logs):
            if not entry.name.endswith(".pid") or not entry.is_file:
                continue
            names = read_service_json(logs, entry.name)
            if names is None:
                continue  # not the service's
            killed += signal_process(names, signal.SIGKILL)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=logs)
    finally:
        os.close(logs)
    return killed
