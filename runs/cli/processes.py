"""The processes of ``simrun serve``: each forked from serve, which has Django set up.

A child runs its command line (``python -m MODULE ARGS``) as Python would, but in a fork of
serve instead of a new interpreter: Python's start and Django's setup, a second or more of
CPU for each of five children, are done once. Its command line is still its title (what
``ps`` and ``/proc/PID/cmdline`` show), and it gets what ``subprocess`` gave it: its
environment, the home as its folder, no standard input, SIGTERM when serve dies.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path

from setproctitle import setproctitle

RESTARTS = 5
"""A child that dies more often than this within ``RESTART_WINDOW_S`` stops the service."""
RESTART_WINDOW_S = 60.0
STOP_TIMEOUT_S = 20.0
"""Seconds the children get to stop after SIGTERM before they are killed."""
PR_SET_PDEATHSIG = 1
FORK = multiprocessing.get_context("fork")


@dataclass
class Child:
    """A process of the service: its name, its command, its restarts."""

    name: str
    argv: list[str]
    """``[python, "-m", module, *args]``: what it runs, and its title."""
    env: dict[str, str] = field(default_factory=dict)
    quiet: bool = False
    """Its standard output dropped (Celery prints its shutdown there; it logs to stderr)."""
    first: bool = False
    """Started at once; the others once the dashboard answers (``serve.start_all``)."""
    process: BaseProcess | None = None
    restarts: deque[float] = field(default_factory=deque)

    def ended(self) -> bool:
        """Whether it was started and has ended."""
        return self.process is not None and self.process.exitcode is not None


def start(child: Child, home: Path) -> None:
    """Fork ``child`` off this process. Its database connections are closed first: a fork
    would share their sockets, and a child closing its copy ends the parent's session."""
    from django.db import connections

    connections.close_all()
    # What serve holds by now (Django, its apps, the migrations' graph) is left out of every
    # collection of the children's garbage: they would scan it, and copy each page they touch.
    gc.freeze()
    # multiprocessing's fork runs the libraries' after-fork hooks in the child (Celery's
    # app drops the broker connections it inherited) and leaves without the interpreter's
    # teardown, seconds of garbage collection of Django on a busy machine.
    child.process = FORK.Process(target=run_child, args=(child, home, os.getpid()), name=child.name)
    child.process.start()


def run_child(child: Child, home: Path, parent: int) -> None:
    """In the forked child of ``parent``: become the command ``child.argv``, run it to its end."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # serve's handler only sets serve's stop
    die_with_parent()
    if os.getppid() != parent:  # serve died before the line above
        os._exit(1)
    os.environ.update(child.env)
    os.chdir(home)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)
    if child.quiet:
        os.dup2(quiet, 1)
    os.close(quiet)
    setproctitle(subprocess.list2cmdline(child.argv))
    python, option, module, *args = child.argv
    assert option == "-m", child.argv
    sys.argv = [python, *args]  # runpy sets the first to the module's file, as -m does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def die_with_parent() -> None:
    """Receive SIGTERM when serve dies, even by SIGKILL; ignore the terminal's Ctrl-C, which
    serve turns into SIGTERM (while a child starts, a SIGINT left a ``KeyboardInterrupt``
    traceback; gunicorn and Celery still set handlers of their own)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def supervise(found: list[Child], home: Path, stop: threading.Event) -> int:
    """Start again a child that died, until ``stop``; 1 when one dies too often."""
    while not stop.wait(0.2):
        for child in found:
            if child.process is not None and child.process.exitcode is not None:
                now = time.monotonic()
                while child.restarts and now - child.restarts[0] > RESTART_WINDOW_S:
                    child.restarts.popleft()
                if len(child.restarts) >= RESTARTS:
                    print(f"simrun: {child.name} died {RESTARTS} times in a minute; stopping")
                    return 1
                print(f"simrun: {child.name} ended ({child.process.exitcode}); starting it again")
                child.restarts.append(now)
                start(child, home)
    return 0


def stop_children(found: list[Child]) -> None:
    """SIGTERM every child, SIGKILL what still runs after ``STOP_TIMEOUT_S``."""
    running = [c.process for c in found if c.process is not None and c.process.exitcode is None]
    for process in running:
        process.terminate()  # one that ended meanwhile is skipped (multiprocessing's own)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in running:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            process.kill()
            process.join()
