"""A command sweep through the harness against GNU parallel: one program, the same combinations.

The program (``bench/sweep_program.c``, compiled here) burns a fixed amount of its own CPU
time and writes a JSON result file, for every combination of two integer axes. GNU parallel
(Debian's, ``--will-cite -j <cores>``) runs it over the product of the axes, each job writing
its file; the harness runs it as a split task runs, the coordinator alone on all cores
(``simrun-worker`` with ``SIMRUN_ROLE=base`` that merges: the ledger, progress, the report,
the per-unit ``{out}`` directories and the results table included). The two run as
``--repeat`` interleaved pairs (which goes first alternates) and the verdict is the median of
the pairs' ratios (with ``--variant NAME=PYTHONPATH``, e.g. an export of an older commit, a
round runs parallel and each variant of the harness, in an order that rotates). Each round
also runs the floor: ``cores`` bare Python loops of ``mkdir``, ``posix_spawn`` and ``wait4``,
the least any pool in Python does a unit, so the harness's own share of a unit (its figure
less the floor's, measured in the same minutes) reads apart from the machine's; then the
sweep runs once through the whole service: a ``simrun serve`` in a temporary home (its
defaults, SQLite and the filesystem broker), the sweep POSTed to its API and timed until the
API says it succeeded (the planner, the controller, the local backend's launcher and step,
the worker, the merge), after a 4-unit warm-up run; its extra seconds over the (first)
harness's median are printed beside it.

The per-unit overhead is ``wall × cores / units`` less the program's CPU time: what a unit
costs beyond the program itself, on each side. The CPU seconds of each side (its processes',
the programs' included) are printed beside it: on a loaded machine, the steadier figure.

Every run writes into a folder of its own and nothing is removed before the bench ends: on
ext4 without a journal (this machine's disk), each new file or folder skips the inodes freed
in the last minute or more (``recently_deleted`` in the kernel), so a run started after the
removal of the last one's 20,000 files and folders paid for it, at each of its own.

    .venv/bin/python bench/command_sweep.py [--repeat 5] [--only 10000x10] [--no-service]
        [--variant before=/tmp/old --variant after=]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.sweep import SweepSettings  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZES = {
    "10000x10": (10_000, 10.0, 0.9),
    "500x1000": (500, 1000.0, 1.02),
    "200x10": (200, 10.0, 0.9),  # a quick look, not a target of the issue
}
"""Units, milliseconds of CPU per unit, and the largest ratio harness / parallel allowed."""
OVERHEAD_TARGET_MS = 1.0
"""The most a unit of the 10 ms program may cost beyond the program, wall (issue 48)."""


class Timed(NamedTuple):
    """The wall seconds of a run and the CPU seconds of its processes (all it reaped)."""

    wall: float
    cpu: float


class Timer:
    """Times the block: wall clock, and the CPU of the children it reaped."""

    def __enter__(self) -> Timer:
        self._began, self._cpu = time.perf_counter(), _children_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timed = Timed(time.perf_counter() - self._began, _children_cpu() - self._cpu)


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def compile_program(folder: Path) -> Path:
    program = folder / "sweep_program"
    subprocess.run(["gcc", "-O2", "-o", str(program), str(HERE / "sweep_program.c")], check=True)
    return program


def axes(units: int) -> tuple[int, int]:
    """Two axes whose product is ``units``, as square as may be."""
    b = max(d for d in range(1, math.isqrt(units) + 1) if units % d == 0)
    return units // b, b


def parallel_run(
    program: Path, ms: float, shape: tuple[int, int], cores: int, folder: Path
) -> Timed:
    """Seconds of GNU parallel over the product of the axes, each job writing its result."""
    out = Path(tempfile.mkdtemp(prefix="parallel-", dir=folder))  # removed at the end (docstring)
    command = ["parallel", "--will-cite", "-j", str(cores), str(program), f"{ms:g}"]
    command += ["{1}", "{2}", f"{out}/{{#}}.json"]
    command += [":::", *map(str, range(shape[0])), ":::", *map(str, range(shape[1]))]
    with Timer() as timer:
        subprocess.run(command, check=True, stdin=subprocess.DEVNULL)
    assert len(os.listdir(out)) == shape[0] * shape[1]
    return timer.timed


def _bare_loop(
    program: str, ms: str, out: str, shape: tuple[int, int], first: int, step: int
) -> None:
    """Every ``step``-th unit from ``first``: its folder, then its program to its end."""
    for unit in range(first, shape[0] * shape[1], step):
        a, b = divmod(unit, shape[1])
        os.mkdir(f"{out}/{unit}")
        argv = [program, ms, str(a), str(b), f"{out}/{unit}/result.json"]
        os.wait4(os.posix_spawn(program, argv, os.environ), 0)


def floor_run(program: Path, ms: float, shape: tuple[int, int], cores: int, folder: Path) -> Timed:
    """Seconds of ``cores`` bare loops (forked processes) over the product of the axes."""
    out = tempfile.mkdtemp(prefix="floor-", dir=folder)  # removed at the end (docstring)
    fork = multiprocessing.get_context("fork")
    loops = [
        fork.Process(target=_bare_loop, args=(str(program), f"{ms:g}", out, shape, first, cores))
        for first in range(cores)
    ]
    with Timer() as timer:
        for loop in loops:
            loop.start()
        for loop in loops:
            loop.join()
    assert all(loop.exitcode == 0 for loop in loops)
    assert len(os.listdir(out)) == shape[0] * shape[1]
    return timer.timed


def sweep_settings(program: Path, ms: float, shape: tuple[int, int]) -> dict[str, object]:
    return SweepSettings(
        command=[str(program), f"{ms:g}", "{a}", "{b}", "{out}/result.json"],
        sweep={"a": {"range": [0, shape[0], 1]}, "b": {"range": [0, shape[1], 1]}},
        results="result.json",
    ).model_dump(mode="json")


def plan(cores: int) -> dict[str, object]:
    return {
        "cores": cores,
        "memory_gb": 0.25 + cores * 0.5,
        "workers": 1,
        "base_gb": 0.25,
        "per_worker_gb": 0.5,
        "processes": cores,
        "retry_memory_gb": 2.0,
        "coordinator_merges": True,
    }


def harness_run(
    program: Path, ms: float, shape: tuple[int, int], cores: int, folder: Path, pythonpath: str = ""
) -> Timed:
    """Seconds of ``simrun-worker`` as the coordinator alone, merging: the whole split task."""
    store = Path(tempfile.mkdtemp(prefix="store-", dir=folder))  # removed at the end (docstring)
    task_dir = store / "runs" / "bench" / "tasks" / "sim"
    task_dir.mkdir(parents=True)
    task = {"run": "bench", "task": "sim", "kind": "split", "type": "sweep"}
    task |= {"settings": sweep_settings(program, ms, shape), "inputs": {}, "plan": plan(cores)}
    (task_dir / "task.json").write_text(json.dumps(task))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_")}
    env |= {
        "SIMRUN_TASK_DIR": str(task_dir),
        "SIMRUN_SCRATCH": str(store / "scratch"),
        "SIMRUN_ROLE": "base",
        "SIMRUN_CORES": str(cores),
        "SIMRUN_MEMORY_SOURCE": "process",
    }
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with Timer() as timer:
        subprocess.run(
            [str(Path(sys.executable).parent / "simrun-worker")],
            env=env,
            check=True,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    rows = (task_dir / "out" / "results.csv").read_text().count("\n") - 1
    assert rows == shape[0] * shape[1], rows
    return timer.timed


class Served:
    """``simrun serve`` in a home of its own (SQLite and the filesystem broker, its defaults;
    tasks run as the service's user), started once, with a user and a warmed-up sweep."""

    def __init__(self, folder: Path) -> None:
        from tests.e2e.service import Service

        folder.mkdir(parents=True, exist_ok=True)
        self.service = Service(home=folder / "home")
        self.service.start()
        self.api = self.service.client(self.service.user("bench"))

    def sweep(self, program: Path, ms: float, shape: tuple[int, int], cores: int) -> float:
        """Seconds from the POST of the sweep to its run's end, as the API says it (polled
        every 50 ms): the API, the planner, the controller, the local backend's launcher
        and step, the worker and the merge. The run must succeed with a row per unit."""
        from tests.e2e.service import wait_until_ended

        spec = {
            "name": f"bench-{shape[0] * shape[1]}",
            "tasks": {
                "sim": {
                    "command": [str(program), f"{ms:g}", "{a}", "{b}", "{out}/result.json"],
                    "sweep": {"a": {"range": [0, shape[0]]}, "b": {"range": [0, shape[1]]}},
                    "results": "result.json",
                    "cores": cores,
                }
            },
        }
        began = time.perf_counter()
        answer = self.api.post("runs/", json=spec)
        assert answer.status_code in {201, 202}, answer.text
        run_id = str(answer.json()["id"])
        run = wait_until_ended(self.api, run_id, timeout_s=3600, interval_s=0.05)
        elapsed = time.perf_counter() - began
        assert run["state"] == "succeeded", run
        table = self.service.store / "runs" / run_id / "tasks" / "sim" / "out" / "results.csv"
        rows = table.read_text().count("\n") - 1
        assert rows == shape[0] * shape[1], rows
        return elapsed

    def close(self) -> None:
        self.api.close()
        self.service.stop()


def _row(label: str, values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{label:<28} median {statistics.median(values):8.3f}   spread {low:.3f} – {high:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds of each size")
    parser.add_argument("--only", choices=sorted(SIZES), action="append", help="sizes to run")
    parser.add_argument("--no-service", action="store_true", help="skip the end-to-end run")
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=PYTHONPATH: a harness to run (default: this checkout, as 'harness')",
    )
    args = parser.parse_args(argv)
    variants = dict(v.split("=", 1) for v in args.variant) or {"harness": ""}
    if shutil.which("parallel") is None:
        print("GNU parallel is not installed: apt-get install -y parallel", file=sys.stderr)
        return 2
    version = subprocess.run(
        ["parallel", "--version"], capture_output=True, text=True, check=True
    ).stdout.splitlines()[0]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{version}, {args.cores} cores, {args.repeat} interleaved rounds per size")
    print(f"load average before: {load} (other work on the machine widens the spread)")
    failed = False
    with tempfile.TemporaryDirectory(prefix="simrun-sweep-bench-") as temporary:
        folder = Path(temporary)
        program = compile_program(folder)
        for size in args.only or list(SIZES):
            units, ms, target = SIZES[size]
            shape = axes(units)
            sides = ["parallel", "floor", *variants]
            runs: dict[str, list[Timed]] = {side: [] for side in sides}
            for index in range(args.repeat):
                order = sides[index % len(sides) :] + sides[: index % len(sides)]
                for side in order:
                    if side == "parallel":
                        timed = parallel_run(program, ms, shape, args.cores, folder)
                    elif side == "floor":
                        timed = floor_run(program, ms, shape, args.cores, folder)
                    else:
                        path = variants[side]
                        timed = harness_run(program, ms, shape, args.cores, folder, path)
                    runs[side].append(timed)
                shown = ", ".join(f"{side} {runs[side][-1].wall:.3f} s" for side in sides)
                print(f"  round {index + 1}: {shown}", flush=True)
            print(f"\n{units} units of a {ms:g} ms program ({shape[0]} × {shape[1]})")
            print(_row("GNU parallel (s)", [t.wall for t in runs["parallel"]]))
            overhead = {
                side: statistics.median(t.wall for t in timed) * args.cores / units * 1000 - ms
                for side, timed in runs.items()
            }
            cpu = {
                side: statistics.median(t.cpu for t in timed) / units * 1000 - ms
                for side, timed in runs.items()
            }
            for side in variants:
                pairs = list(zip(runs[side], runs["parallel"], strict=True))
                ratios = [h.wall / p.wall for h, p in pairs]
                median = statistics.median(ratios)
                verdict = "met" if median <= target else "MISSED"
                failed |= median > target
                print(_row(f"{side} (s)", [t.wall for t in runs[side]]))
                print(f"{_row(f'ratio {side} / parallel', ratios)}   target ≤ {target}  {verdict}")
                print(_row(f"CPU ratio {side} / parallel", [h.cpu / p.cpu for h, p in pairs]))
                mark = "met" if overhead[side] <= OVERHEAD_TARGET_MS else "MISSED"
                print(
                    "per-unit overhead beyond the program: "
                    f"parallel {overhead['parallel']:.2f} ms, "
                    f"{side} {overhead[side]:.2f} ms   target ≤ {OVERHEAD_TARGET_MS} ms  {mark} "
                    f"(of CPU: {cpu['parallel']:.2f} ms, {cpu[side]:.2f} ms)"
                )
                shares = [
                    (h.wall - f.wall) * args.cores / units * 1000
                    for h, f in zip(runs[side], runs["floor"], strict=True)
                ]
                print(
                    f"the floor (bare loops) {overhead['floor']:.2f} ms a unit "
                    f"(of CPU: {cpu['floor']:.2f} ms); {side}'s own share, median of the "
                    f"rounds: {statistics.median(shares):.2f} ms"
                )
            if not args.no_service:
                # Started after the pairs, stopped before the next size: its idle loops are
                # no load on them.
                served = Served(folder / size)
                try:
                    served.sweep(program, ms, (2, 2), args.cores)  # imports, connections
                    seconds = served.sweep(program, ms, shape, args.cores)
                finally:
                    served.close()
                first = next(iter(variants))
                extra = seconds - statistics.median(t.wall for t in runs[first])
                print(
                    f"through simrun serve, POST to succeeded (once): {seconds:.3f} s, "
                    f"{extra:+.3f} s over the median of {first}"
                )
            sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
