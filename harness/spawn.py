"""One run of a program, as cheaply as Python can: ``posix_spawn``, then ``wait4``.

A pool process of a command sweep runs one program per unit; the per-unit cost beside the
program itself is what this module keeps small. ``posix_spawn`` (a ``vfork`` and an ``exec``
in glibc) copies no page of the pool process and needs no Python in the child; ``wait4`` gives
the exit status and the child's peak resident memory in one call. The working directory is
the pool process's own for the instant of the spawn (``posix_spawn`` of Python 3.11 cannot
set one), which a pool process may change: its only other thread, which stores finished
units while one runs (``harness.pool.Unstored``), opens paths that are absolute.
"""

from __future__ import annotations

import os
import signal
import time
from typing import NamedTuple

DEFAULT_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
"""Reset to their default in the program: a pool process ignores SIGTERM, and Python ignores
SIGPIPE and SIGXFSZ; an ignored signal would stay ignored across the ``exec``."""


class Ended(NamedTuple):
    """How a program ended: its exit code (``-N`` when signal ``N`` killed it), its seconds
    from spawn to reap, its peak resident memory (``ru_maxrss``) in bytes."""

    code: int
    seconds: float
    peak_bytes: int


def run(
    program: str,
    argv: list[str],
    env: dict[str, str],
    *,
    cwd: str,
    home: int,
    streams: tuple[int, int, int],
) -> Ended:
    """Run ``program`` with ``argv`` and ``env`` in ``cwd`` to its end, with the descriptors
    ``streams`` as its standard input, output and error. ``home`` is a descriptor of the
    directory this process returns to. ``OSError`` when it cannot be started."""
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(streams)]
    began = time.perf_counter()
    os.chdir(cwd)
    try:
        pid = os.posix_spawn(
            program, argv, env, file_actions=actions, setsigdef=DEFAULT_SIGNALS, setsigmask=()
        )
    finally:
        os.fchdir(home)
    _, status, usage = os.wait4(pid, 0)
    return Ended(
        os.waitstatus_to_exitcode(status), time.perf_counter() - began, usage.ru_maxrss * 1024
    )
