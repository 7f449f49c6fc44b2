"""The live memory of a running worker: ``task_dir/live/<worker>-<attempt>.json``, rewritten at
every heartbeat while it runs, for the run page's sparkline."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import cast

from harness.heartbeat import Heartbeat
from harness.memory import MemorySampler
from harness.report import LIVE_SAMPLES, LiveMemory, live_path
from tests.harness.processes import clean_environ, finish, spawn
from tests.harness.task_dirs import make_task
from tests.polling import wait_for

GIB = 2**30


class Sampler:
    """A sampler whose samples the test sets."""

    def __init__(self) -> None:
        self.value = 100
        self.peak: int | None = None
        self.lock = threading.Lock()

    def sample(self) -> int:
        with self.lock:
            self.peak = max(self.peak or 0, self.value)
            return self.value


def read_live(path: Path) -> LiveMemory | None:
    try:
        return LiveMemory.from_json(path.read_text())
    except FileNotFoundError:
        return None


def test_the_heartbeat_rewrites_the_live_memory_while_it_runs_and_once_at_its_end(
    tmp_path: Path,
) -> None:
    sampler = Sampler()
    path = live_path(tmp_path, "sweep-w0", 1)
    with Heartbeat(cast(MemorySampler, sampler), heartbeat_s=0.05, live=path):
        first = wait_for(lambda: (live := read_live(path)) and live.samples, 30, "a live file")
        assert first[-1][1] == 100
        with sampler.lock:
            sampler.value = 5 * GIB
        wait_for(
            lambda: (live := read_live(path)) and live.samples[-1][1] == 5 * GIB,
            30,
            "the new sample in the live file",
        )
        with sampler.lock:
            sampler.value = 2 * GIB
    live = read_live(path)
    assert live is not None
    assert live.samples[-1][1] == 2 * GIB and live.peak_bytes == 5 * GIB
    assert len(live.samples) <= LIVE_SAMPLES
    times = [t for t, _ in live.samples]
    assert times == sorted(times) and live.updated >= times[-1]
    assert path == tmp_path / "live" / "sweep-w0-1.json"


def test_a_live_file_keeps_only_the_latest_samples() -> None:
    samples = [[float(t), t] for t in range(LIVE_SAMPLES + 30)]
    text = json.dumps({"samples": samples, "peak_bytes": 7, "updated": 1.0})
    live = LiveMemory.from_json(text)
    assert len(live.samples) == LIVE_SAMPLES and live.samples[-1] == (LIVE_SAMPLES + 29.0, 149)


def test_simrun_exec_writes_the_live_memory_of_its_command_while_it_runs(
    store: Path, tmp_path: Path, logs: Path
) -> None:
    task_dir = make_task(store, "csv-stats", {}, task="hold", kind="plugin")
    go = tmp_path / "go"
    hold = (
        "import os, time\n"
        "block = bytearray(64 << 20)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    )
    env = clean_environ(
        SIMRUN_TASK_DIR=str(task_dir),
        SIMRUN_SCRATCH=str(tmp_path / "scratch"),
        SIMRUN_ATTEMPT="2",
        SIMRUN_MEMORY_SOURCE="process",
    )
    process = spawn("exec", env, logs / "exec.log", "python", "-c", hold)
    path = live_path(task_dir, "hold", 2)
    running = wait_for(
        lambda: (live := read_live(path)) and max(b for _, b in live.samples) >= 64 << 20 and live,
        60,
        "the live memory of the running command",
    )
    assert running.peak_bytes is not None and running.peak_bytes >= 64 << 20
    go.write_text("go")
    assert finish(process, logs / "exec.log") == 0
