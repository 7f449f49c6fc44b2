"""The thread that samples the memory and touches the heartbeat while a worker works."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from harness.files import write_atomic
from harness.memory import MemorySampler
from harness.report import LIVE_SAMPLES, LiveMemory

SAMPLE_S = 0.2
"""Seconds between two memory samples (more when a sample is slow to take)."""
SAMPLE_COST = 20
"""A sample waits at least this many times what the last one took."""

log = logging.getLogger("simrun.harness")


class Heartbeat:
    """Samples ``sampler`` every ``SAMPLE_S`` and calls ``beat(k)`` every ``heartbeat_s``.

    Used as a context manager: the thread runs while the block does. A beat that fails (a
    hiccup of the shared filesystem) is logged and tried again at the next one. With ``live``
    (``harness.report.live_path``) each beat also rewrites the recent memory there
    (``LiveMemory``: the largest sample since the beat before, the last ``LIVE_SAMPLES``), so
    the service can show it while the worker runs; the block's end writes it once more.
    """

    def __init__(
        self,
        sampler: MemorySampler,
        beat: Callable[[int], None] | None = None,
        heartbeat_s: float = 1.0,
        live: Path | None = None,
    ) -> None:
        self.sampler = sampler
        self.beat = beat
        self.heartbeat_s = heartbeat_s
        self.live = live
        self._samples: deque[tuple[float, int]] = deque(maxlen=LIVE_SAMPLES)
        self._window: int | None = None
        """The largest sample since the last beat."""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simrun-heartbeat", daemon=True)

    def _sample(self) -> None:
        value = self.sampler.sample()
        if value is not None and (self._window is None or value > self._window):
            self._window = value

    def _run(self) -> None:
        count, next_beat = 1, time.monotonic() + self.heartbeat_s
        interval = shortest = min(SAMPLE_S, self.heartbeat_s)
        while not self._done.wait(interval):
            began = time.perf_counter()
            self._sample()
            # A process tree on a busy machine is slow to read: keep sampling under 5 % of a
            # core, and never sparser than the heartbeat.
            cost = time.perf_counter() - began
            interval = min(max(shortest, cost * SAMPLE_COST), max(shortest, self.heartbeat_s))
            if time.monotonic() >= next_beat:
                try:
                    if self.beat is not None:
                        self.beat(count)
                    self._write_live()
                except OSError as error:
                    log.warning("heartbeat %d failed: %s", count, error)
                count, next_beat = count + 1, time.monotonic() + self.heartbeat_s

    def _write_live(self) -> None:
        """Add the window's largest sample to the live memory and rewrite its file."""
        if self.live is None:
            return
        now = round(time.time(), 3)
        if self._window is not None:
            self._samples.append((now, self._window))
            self._window = None
        live = LiveMemory(samples=list(self._samples), peak_bytes=self.sampler.peak, updated=now)
        self.live.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.live, live.to_json())

    def __enter__(self) -> Heartbeat:
        self._sample()
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
        self._sample()
        try:
            self._write_live()
        except OSError as error:
            log.warning("the live memory cannot be written: %s", error)
