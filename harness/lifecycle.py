"""The start of a harness command: SIGTERM handled from the first instruction, logging."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import FrameType

from harness.config import MEMORY_LIMIT_ENV
from harness.memory import descendants


class SignalStop(threading.Event):
    """A stop a signal handler may set. ``threading.Event.set`` takes the event's lock, which
    the main thread holds inside its own ``wait`` when the signal lands there: the handler
    then waits for it for ever. This one is a flag, and its ``wait`` sleeps in slices."""

    SLICE_S = 0.05

    def __init__(self) -> None:
        super().__init__()
        self._stopped = False

    def set(self) -> None:
        self._stopped = True

    def is_set(self) -> bool:
        return self._stopped

    def clear(self) -> None:
        self._stopped = False

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the stop was set before ``timeout`` (None: wait until it is)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopped:
            left = self.SLICE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, self.SLICE_S))
        return True


@contextmanager
def sigterm_stops() -> Iterator[threading.Event]:
    """Set the yielded event on SIGTERM while the block runs; the old handler after it.

    SIGTERM is unblocked once the handler is in place: ``restart`` blocks it across the
    ``exec``, so one that arrives while the new interpreter starts is delivered here.
    """
    stop = SignalStop()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def configure_logging(program: str) -> None:
    """Log lines with time and program to stderr (the pod's log)."""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {program} %(levelname)s %(message)s"
    )


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process below it (a pool process and the program it runs).

    The process is stopped first, so it starts nothing more while its tree is listed.
    """
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    for below in [*reversed(descendants(pid)), pid]:
        try:
            os.kill(below, signal.SIGKILL)
        except ProcessLookupError:
            continue


TERMINATION_LOG = "/dev/termination-log"
"""Where Kubernetes reads a container's termination message, which Argo appends to the
message of its node (``main: OOMKilled (exit code 137): <message>``, Argo 3.7 on)."""
AFTER_MEMORY_KILL = "SIMRUN_AFTER_MEMORY_KILL"
"""Set to 1 by the pod's ``podSpecPatch`` when the attempt before was killed for memory."""
RETRY_MEMORY_NOTE = "simrun: the retry memory after a kill for memory"
"""The start of the termination message of an attempt with the retry memory after a proven
kill; the memory follows it in brackets (``(4.5 GiB)``), so Argo's message of the node names
it and a harness of before (the note alone) still matches the retry expression."""


def retry_memory_note(env: Mapping[str, str]) -> str:
    """The note of an attempt with the retry memory, naming it when ``SIMRUN_MEMORY_LIMIT_GB``
    (the retry memory, set by the pod's ``podSpecPatch``) is a number."""
    try:
        gb = float(env.get(MEMORY_LIMIT_ENV, ""))
    except ValueError:
        return RETRY_MEMORY_NOTE
    return (
        f"{RETRY_MEMORY_NOTE} ({gb:g} GiB)" if math.isfinite(gb) and gb > 0 else RETRY_MEMORY_NOTE
    )


def note_retry_memory(env: Mapping[str, str], path: str | None = None) -> None:
    """Say in the termination message that this attempt runs with the retry memory after a
    proven kill for memory, and which (``retry_memory_note``): Argo's retry expression reads
    it, so a second kill of the pod is not retried (Ruling 35), and Argo's message of the node
    names the memory it had. Nothing is written elsewhere, nor when the file cannot be."""
    if env.get(AFTER_MEMORY_KILL) != "1":
        return
    try:
        with open(path or TERMINATION_LOG, "w") as log:
            log.write(retry_memory_note(env))
    except OSError:
        pass
