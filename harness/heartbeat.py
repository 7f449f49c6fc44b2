"""The thread that samples the memory and touches the heartbeat while a worker works."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from harness.memory import MemorySampler

SAMPLE_S = 0.2
"""Seconds between two memory samples (more when a sample is slow to take)."""
SAMPLE_COST = 20
"""A sample waits at least this many times what the last one took."""

log = logging.getLogger("simrun.harness")


class Heartbeat:
    """Samples ``sampler`` every ``SAMPLE_S`` and calls ``beat(k)`` every ``heartbeat_s``.

    Used as a context manager: the thread runs while the block does. A beat that fails (a
    hiccup of the shared filesystem) is logged and tried again at the next one.
    """

    def __init__(
        self,
        sampler: MemorySampler,
        beat: Callable[[int], None] | None = None,
        heartbeat_s: float = 1.0,
    ) -> None:
        self.sampler = sampler
        self.beat = beat
        self.heartbeat_s = heartbeat_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simrun-heartbeat", daemon=True)

    def _run(self) -> None:
        count, next_beat = 1, time.monotonic() + self.heartbeat_s
        interval = shortest = min(SAMPLE_S, self.heartbeat_s)
        while not self._done.wait(interval):
            began = time.perf_counter()
            self.sampler.sample()
            # A process tree on a busy machine is slow to read: keep sampling under 5 % of a
            # core, and never sparser than the heartbeat.
            cost = time.perf_counter() - began
            interval = min(max(shortest, cost * SAMPLE_COST), max(shortest, self.heartbeat_s))
            if self.beat is not None and time.monotonic() >= next_beat:
                try:
                    self.beat(count)
                except OSError as error:
                    log.warning("heartbeat %d failed: %s", count, error)
                count, next_beat = count + 1, time.monotonic() + self.heartbeat_s

    def __enter__(self) -> Heartbeat:
        self.sampler.sample()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()
        self.sampler.sample()
