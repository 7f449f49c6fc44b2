"""The heartbeat of a worker is touched every ``heartbeat_s`` from its start to its end: each
unit, the first to the last, sees it beat twice while it computes."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import BaseModel

from harness import worker
from harness.config import TaskPaths
from harness.examples.squares import TASK_TYPE as SQUARES
from harness.ledger import Ledger
from harness.tasktypes import TaskType
from tests.harness.task_dirs import make_task

BEATS_SEEN = 2
"""The beats each unit waits for while it runs."""


class WatchSettings(BaseModel):
    n: int = 5
    heartbeat: str


def _beat(path: Path) -> int:
    return int(json.loads(path.read_text())["beat"])


def _watch(settings: WatchSettings, context: None, index: int) -> int:
    """Wait until the worker's heartbeat beat ``BEATS_SEEN`` times since this unit began (a
    beat that stopped fails the unit); the beat it began at."""
    path = Path(settings.heartbeat)
    began = _beat(path)
    deadline = time.monotonic() + 30
    while _beat(path) < began + BEATS_SEEN:
        if time.monotonic() > deadline:
            raise RuntimeError(f"unit {index}: the heartbeat stood still at {_beat(path)}")
        time.sleep(0.01)
    return began


WATCH = TaskType(
    name="watch", settings=WatchSettings, units=lambda s: s.n, compute=_watch, merge=SQUARES.merge
)


def test_the_heartbeat_beats_every_heartbeat_s_from_the_first_unit_to_the_last(
    store: Path,
) -> None:
    task_dir = make_task(store, "watch", {"n": 5})
    paths = TaskPaths(task_dir=task_dir, store=store)
    heartbeat = paths.ledger / "heartbeats" / "sweep-w1"
    settings = WatchSettings(n=5, heartbeat=str(heartbeat))

    report = worker.run_worker(
        WATCH,
        settings,
        paths,
        "sweep-w1",
        cores=1,
        memory_bytes=None,
        base_gb=0.1,
        per_worker_gb=0.1,
        heartbeat_s=0.05,
    )

    assert report.units_done == list(range(5)) and not report.failed
    # One process computed the units one after the other, each while the heart beat: the
    # beat each began at grows by at least BEATS_SEEN from one to the next, until the end.
    began = Ledger.read(paths.ledger).results()
    assert all(b - a >= BEATS_SEEN for a, b in zip(began, began[1:], strict=False)), began
    assert _beat(heartbeat) >= began[-1] + BEATS_SEEN
