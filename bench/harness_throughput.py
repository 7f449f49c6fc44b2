"""What the harness costs over a bare process pool on the same CPU-bound units.

The same unit function runs as a split task through the harness (a coordinator alone on all
cores: ``run_worker`` then ``run_merge``, ledger, progress and report included) and through a
bare ``concurrent.futures.ProcessPoolExecutor`` with as many processes and the best of a few
chunk sizes. Units of 1 ms and of 0.1 ms; the targets are ≤ 1.10× and ≤ 1.5×. The machine may
be shared: every figure is run ``--repeat`` times and the best and the median are printed.

    .venv/bin/python bench/harness_throughput.py [--repeat 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

from pydantic import BaseModel

from harness.config import TaskPaths
from harness.merge import run_merge
from harness.tasktypes import MergeContext, TaskType
from harness.worker import run_worker

TARGETS = {1.0: 1.10, 0.1: 1.5}
"""Unit milliseconds and the largest ratio harness / bare pool allowed."""
CHUNKS = (1, 8, 64, 512)


def spin(iterations: int) -> int:
    """CPU-bound work of a fixed size (not of a fixed time, which contention would shorten)."""
    total = 0
    for i in range(iterations):
        total += i * i
    return total & 0xFFFF


class SpinSettings(BaseModel):
    units: int
    iterations: int


def _units(settings: SpinSettings) -> int:
    return settings.units


def _compute(settings: SpinSettings, context: None, index: int) -> int:
    return spin(settings.iterations)


def _merge(settings: SpinSettings, context: MergeContext) -> None:
    (context.out / "sum.txt").write_text(str(sum(context.results)))


SPIN = TaskType(name="spin", settings=SpinSettings, units=_units, compute=_compute, merge=_merge)


def _bare_unit(iterations: int, index: int) -> int:
    return spin(iterations)


def iterations_per_ms() -> float:
    """Calibrated on this machine now: the best of several short measurements."""
    best = float("inf")
    for _ in range(7):
        began = time.perf_counter()
        spin(200_000)
        best = min(best, time.perf_counter() - began)
    return 200_000 / (best * 1000)


def bare(units: int, iterations: int, processes: int, chunk: int) -> float:
    began = time.perf_counter()
    with ProcessPoolExecutor(processes) as pool:
        results = list(pool.map(partial(_bare_unit, iterations), range(units), chunksize=chunk))
    assert len(results) == units
    return time.perf_counter() - began


def harness(units: int, iterations: int, processes: int) -> float:
    settings = SpinSettings(units=units, iterations=iterations)
    with tempfile.TemporaryDirectory(prefix="simrun-bench-") as store:
        task_dir = Path(store) / "runs" / "bench" / "tasks" / "spin"
        task_dir.mkdir(parents=True)
        paths = TaskPaths(task_dir=task_dir, store=Path(store))
        began = time.perf_counter()
        report = run_worker(
            SPIN,
            settings,
            paths,
            "spin-w0",
            cores=processes,
            memory_bytes=None,
            base_gb=0.1,
            per_worker_gb=0.1,
            coordinator=True,
        )
        run_merge(SPIN, settings, paths)
        elapsed = time.perf_counter() - began
    assert len(report.units_done) == units
    return elapsed


def _row(label: str, values: list[float]) -> str:
    return f"{label:<24} best {min(values):7.3f}   median {statistics.median(values):7.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each figure")
    parser.add_argument("--seconds", type=float, default=5.0, help="CPU seconds of units")
    parser.add_argument("--processes", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args(argv)
    rate = iterations_per_ms()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{args.processes} processes, {rate:,.0f} iterations per ms, {args.repeat} runs each")
    print(f"load average before: {load} (other work on the machine skews the figures)")
    failed = False
    for unit_ms, target in TARGETS.items():
        iterations = max(1, round(rate * unit_ms))
        units = round(args.seconds * 1000 / unit_ms)
        chunk = min(CHUNKS, key=lambda c: bare(units, iterations, args.processes, c))
        times: dict[str, list[float]] = {"bare": [], "harness": []}
        ratios = []
        for _ in range(args.repeat):
            times["bare"].append(bare(units, iterations, args.processes, chunk))
            times["harness"].append(harness(units, iterations, args.processes))
            ratios.append(times["harness"][-1] / times["bare"][-1])
        best = min(times["harness"]) / min(times["bare"])
        median = statistics.median(ratios)
        verdict = "ok" if best <= target else "ABOVE TARGET"
        failed |= best > target
        print(f"\nunits of {unit_ms} ms: {units} units, bare pool chunk size {chunk}")
        print(_row("bare pool (s)", times["bare"]))
        print(_row("harness (s)", times["harness"]))
        print(
            f"{'ratio harness / bare':<24} best {best:7.3f}   median {median:7.3f}   "
            f"target ≤ {target}  {verdict}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
