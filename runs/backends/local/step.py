"""The step of the local backend: start what may start, notice what began and ended.

A periodic step under a file lock (``serve``'s step process, ``run_steps``) kills what a
wall killed outright left (``wall.sweep``), reads every live run from the files, kills what a
stop's grace left running, records the end of attempts whose launcher was lost, starts what
the DAG and the machine's free cores and memory allow (``admission``) and refuses what it can
never hold, marks the runs that ended and writes a digest of each live run's status
(``versions``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import untrusted
from runs.backends.local import cgroups, launch, processes, submissions, wall
from runs.backends.local import env as local_env
from runs.backends.local import wake as local_wake
from runs.backends.local.admission import Demand, Held, admit
from runs.backends.local.launch_file import STARTING_EXIT, Launched, dump
from runs.backends.local.logs import logs_dir
from runs.backends.local.processes import launcher_alive, process_alive, signal_process
from runs.backends.local.state import (
    NodeView,
    RunView,
    Submission,
    next_memory_gb,
    read_service_json,
    status_of,
)
from runs.backends.local.submissions import read_json

if TYPE_CHECKING:
    from runs.backends.local.backend import LocalBackend

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""Seconds between two steps when nothing wakes the step earlier."""
VERSIONS_STALE_S = 10 * POLL_S
"""Versions no step rewrote within this are no signal: no step runs, so none is current."""
LOST_AFTER_S = 60.0
"""A launch whose launcher never wrote its pid file within this is lost."""


def versions(state: Path, names: list[str]) -> dict[str, str]:
    """A digest of the status of each named live run as the last step read it
    (``ChangeSignal``): one file read for all; empty while no step rewrote it lately."""
    path = state / "versions.json"
    try:
        if time.time() - path.stat().st_mtime > VERSIONS_STALE_S:
            return {}
    except OSError:
        return {}
    known = read_json(path) or {}
    return {name: known[name] for name in names if name in known}


def write_versions(backend: LocalBackend, views: list[RunView]) -> None:
    """Write the digest of the status of every live run, at every step (``versions``),
    from the views the step read (no run's files are read again)."""
    waiting = read_json(submissions.waiting_file(backend.state)) or {}
    found = {}
    for view in views:
        name = view.submission.name
        text = status_of(view, waiting.get(name, {}), backend.hostname).model_dump_json()
        found[name] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    submissions.write_own_json(backend.state / "versions.json", found)


def step(backend: LocalBackend) -> bool:
    """Start what may start, notice what began and ended; whether a process was
    launched, began (its pid file names it) or ended.

    Another process stepping at the same time makes this one return False at once.
    """
    with submissions.step_lock(backend.state, blocking=False) as locked:
        changed = locked and _step(backend)
    if changed:
        for callback in backend.callbacks:
            try:
                callback()
            except Exception:  # a subscriber's failure is no failure of the step
                logger.exception("a subscriber of the local backend failed")
    return changed


def _step(backend: LocalBackend) -> bool:
    now = time.time()
    # What the wall of a build or a learning killed outright left running goes now.
    memory = None if backend.hierarchy is None else backend.hierarchy.parent
    wall.sweep([memory, backend.pids_parent])
    views = []
    for view in (submissions.view(backend.state, s) for s in submissions.live(backend.state)):
        if reap_lost(view, now):
            view = submissions.view(backend.state, view.submission)
        if view.stop is not None and now - view.stop["at"] >= backend.grace_s:
            for _, attempt in view.running():
                signal_process(attempt.pid or {}, signal.SIGKILL)
        views.append(view)
    started = admit_ready(backend, views, now)
    for view in views:
        if view.ended():
            end(backend, view.submission.name, view.submission.run)
    ends = {a.path("exit") for v in views for n in v.nodes.values() for a in n.attempts if a.ended}
    ended = bool(ends - backend.ends_seen)
    backend.ends_seen = ends
    # A process runs from the moment its launcher named it (its pid file), not from its
    # launch: subscribers hear of that too, so a task shows running while it prints.
    began = {a.path("pid") for v in views for n in v.nodes.values() for a in n.attempts if a.began}
    began_now = bool(began - backend.began_seen)
    backend.began_seen = began
    # What the step started is in its runs' files, not yet in the views it read first.
    if started:
        views = [submissions.view(backend.state, v.submission) for v in views]
    write_versions(backend, views)
    return started or ended or began_now


def admit_ready(backend: LocalBackend, views: list[RunView], now: float) -> bool:
    """Start what the machine's free cores and memory allow (``admission``), refuse
    what it can never hold, and keep why the others wait; whether anything started."""
    ready: dict[Demand, tuple[RunView, NodeView]] = {}
    for view in views:
        for node in view.startable():
            demand = Demand(
                view.submission.run,
                node.spec.name,
                node.spec.cores,
                next_memory_gb(node),
                view.submission.owner,
            )
            ready[demand] = (view, node)
    held = [
        Held(view.submission.run, attempt.cores, attempt.memory_gb, view.submission.owner)
        for view in views
        for _, attempt in view.running()
    ]
    last_start: dict[int | None, float] = {}
    for view in views:
        for node in view.nodes.values():
            for attempt in node.attempts:
                if (started := attempt.started) is not None:
                    owner = view.submission.owner
                    last_start[owner] = max(started, last_start.get(owner, started))
    found = admit(list(ready), held, backend.cores, backend.memory_gb, last_start)
    for demand in found.start:
        view, node = ready[demand]
        # Sources and packages are built as the task user, by this Python.
        built = view.submission.snapshots or view.submission.packages
        kind = "split" if built else node.spec.kind
        if problem := backend.isolation_problem(view.submission.owner, kind):
            refuse(view.submission, node, problem, now)
        else:
            launch.start(backend, view.submission, node)
    for demand, reason in found.refused.items():
        view, node = ready[demand]
        refuse(view.submission, node, reason, now)
    waiting: dict[str, dict[str, str]] = {}
    for demand, reason in found.waiting.items():
        name = ready[demand][0].submission.name
        waiting.setdefault(name, {})[demand.node] = reason
    if read_json(submissions.waiting_file(backend.state)) != waiting:
        submissions.write_own_json(submissions.waiting_file(backend.state), waiting)
    return bool(found.start or found.refused)


def refuse(submission: Submission, node: NodeView, reason: str, now: float) -> None:
    """End a node that can never start here as an attempt that failed, saying why."""
    stem = f"{node.spec.name}-{len(node.attempts)}"
    message = f"not started: {reason}"
    logs = logs_dir(submission, node.spec.task)
    try:
        log = untrusted.open_own(logs, f"{stem}.log")
        with os.fdopen(log, "a") as handle:
            handle.write(f"simrun: {message}\n")
        launched = Launched(started=now, cores=0, memory_gb=0)
        untrusted.write_atomic_at(logs, f"{stem}.launch", dump(launched))
        end = {"exit_code": STARTING_EXIT, "signal": None, "ended": now, "message": message}
        untrusted.write_atomic_at(logs, f"{stem}.exit", json.dumps(end))
    finally:
        os.close(logs)


def reap_lost(view: RunView, now: float) -> bool:
    """Record the end of attempts whose launcher died without recording it."""
    lost = False
    for _, attempt in view.running():
        names = attempt.pid
        if names is None:
            if now - attempt.launch["started"] < LOST_AFTER_S:  # type: ignore[index]
                continue
        elif launcher_alive(names) or process_alive(names):
            continue
        logs = logs_dir(view.submission, view.nodes[attempt.node].spec.task)
        try:
            if read_service_json(logs, attempt.path("exit").name) is not None:
                continue  # the launcher recorded the end after all
            kills = 0
            launch = attempt.launch or {}
            if cgroup := launch.get("cgroup"):
                kills = cgroups.oom_kills(Path(cgroup))
                cgroups.remove(Path(cgroup))
            if pids_cgroup := launch.get("pids_cgroup"):
                cgroups.remove(Path(pids_cgroup))
            end = {
                "exit_code": None,
                "signal": None,
                "oom_kills": kills,
                "ended": now,
                "message": "lost: its launcher ended without recording the end of the process",
            }
            untrusted.write_atomic_at(logs, attempt.path("exit").name, json.dumps(end))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(attempt.path("pid").name, dir_fd=logs)
        finally:
            os.close(logs)
        lost = True
    return lost


def end(backend: LocalBackend, name: str, run: str) -> None:
    """Remember that a run ended, forgetting the oldest beyond ``ENDED_KEPT``; its venv and
    scratch go."""
    submissions.mark_ended(backend.state, name)
    local_env.remove(backend.envs / run)
    untrusted.remove_tree(backend.scratch, [run])  # however deep its tasks made it


def run_steps(backend: LocalBackend, stop: threading.Event, poll_s: float = POLL_S) -> None:
    """Step until ``stop`` is set: at once when woken (a submission, an end), else every poll_s.

    First kills the processes that a service before left for ended or unknown runs.
    """
    processes.kill_orphans(backend)
    submissions.make_state(backend.state)
    wake = local_wake.listen(backend.address)  # None: another service steps this store, polls
    try:
        while not stop.is_set():
            try:
                step(backend)
            except Exception:  # one bad step (a full disk, a callback) must not end the loop
                logger.exception("the step of the local backend failed")
            local_wake.wait(wake, poll_s)
    finally:
        local_wake.close(wake, backend.address)
