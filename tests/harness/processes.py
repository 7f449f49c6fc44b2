"""The harness's programs as real processes: their environment, started in a session of
their own, waited for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

PROGRAMS = {"worker": "harness.worker", "merge": "harness.merge", "exec": "harness.execute"}


def clean_environ(**values: str) -> dict[str, str]:
    """This process's environment without any ``SIMRUN_*``, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_")}
    env.update(values)
    return env


def spawn(
    program: str,
    env: Mapping[str, str],
    log: Path,
    *args: str,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``simrun-<program>`` as a real process in its own session, its output in ``log``."""
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", PROGRAMS[program], *args],
            env=dict(env),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )


def block_sigterm() -> None:
    """A ``preexec_fn``: the program starts with SIGTERM blocked, so one sent now waits for
    the program's own handler (which unblocks it)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def finish(process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> int:
    """Wait for a process; on a timeout kill its group and fail with its log."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"still running after {timeout} s:\n{log.read_text()}")
