"""Which process a pid is, and the tree of processes below the launcher.

A pid names the process recorded only while its start time and command line are the ones
recorded: a pid is reused. The launcher is the subreaper of its process's tree, so it signals,
kills and reaps every descendant itself, whatever its session or group.

Only the standard library and the harness: the launcher imports it from its directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from pathlib import Path

from harness.memory import descendants

PR_SET_CHILD_SUBREAPER = 36
"""prctl: orphaned descendants of the launcher become its children, not init's."""
REAP_ROUNDS = 50
"""The rounds of killing what is left of a process tree before the launcher gives up."""


def process_start(pid: int) -> int | None:
    """When a process started, in clock ticks since boot (field 22 of its stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def process_cmdline(pid: int) -> list[str] | None:
    """The command line of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1]


def same_process(pid: int, start: int | None, cmdline: list[str] | None) -> bool:
    """Whether ``pid`` is still the process recorded: the same start time and command line."""
    return start is not None and process_start(pid) == start and process_cmdline(pid) == cmdline


def signal_tree(signum: int) -> None:
    """Signal every descendant of the launcher, wherever its session or group."""
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def end_tree() -> None:
    """Kill every descendant left (a ``setsid``/``nohup`` child too) and reap them: the
    launcher is their subreaper, so none escapes to init."""
    for _ in range(REAP_ROUNDS):
        left = descendants(os.getpid())
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        time.sleep(0.01)


def become_subreaper() -> None:
    """Make the orphans of the process tree children of the launcher (Linux prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def wait_reaping(pid: int) -> int:
    """Wait for the process ``pid`` (its status as ``Popen.returncode``), reaping every other
    child as it exits meanwhile: the orphans of its tree, whose subreaper the launcher is."""
    while True:
        try:
            found, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return -signal.SIGKILL.value  # reaped elsewhere: cannot happen in the launcher
        if found == pid:
            return os.waitstatus_to_exitcode(status)
