"""Latency of the local backend through the whole service (``simrun serve``).

1. The CPU an idle serve spends, all its processes, over ``--idle`` seconds before any run
   (no target: issue 48 set none; the embedded broker's workers no longer poll it).
2. Submit → succeeded of a run of one trivial task (``true``), ``--runs`` times in a row, as a
   user feels it, median and p95. Target: median ≤ 0.1 s (issue 48). Printed apart: the
   launcher's life (its wall and ``true``), as it recorded it, which is part of that time.
3. A ``squares`` sweep through the service against the harness alone (``simrun-worker`` run
   by hand as the coordinator, on the same task): the service's overhead in seconds.

Run: ``.venv/bin/python bench/local_latency.py`` (starts its own serve in a temporary home).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.service import (  # noqa: E402
    Service,
    service_processes,
    submit,
    wait_until_ended,
)

POLL_S = 0.01
TARGET_S = 0.1
"""The largest median overhead of a trivial run allowed (issue 48)."""
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
SETTLE_S = 6.0
"""Waited after the start before measuring idle: beat's first message (its connection to the
broker made then) comes a poll (``SIMRUN_POLL_S``, 5 s) after its start."""


def cpu_seconds(session: int) -> dict[int, float]:
    """The CPU (user and system) each live process of a serve's session has spent."""
    spent = {}
    for pid in service_processes(session):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            spent[pid] = (int(fields[11]) + int(fields[12])) * TICK_S
    return spent


def idle_share(service: Service, seconds: float) -> float:
    """The share of one core the serve's processes spent over ``seconds`` with nothing to do."""
    assert service.process is not None
    before = cpu_seconds(service.process.pid)
    started = time.perf_counter()
    time.sleep(seconds)
    after = cpu_seconds(service.process.pid)
    spent = sum(total - before.get(pid, 0.0) for pid, total in after.items())
    return spent / (time.perf_counter() - started)


def until_ended(api, run_id: str) -> tuple[float, dict]:
    """Poll a run until it ended; when that was seen and the run."""
    run = wait_until_ended(api, run_id, interval_s=POLL_S)
    return time.perf_counter(), run


def launcher_seconds(service: Service, run_id: str, task: str, node: str) -> float:
    """The life of the launcher of a task's first attempt (its wall and the program), as it
    recorded it."""
    logs = service.store / "runs" / run_id / "tasks" / task / "logs"
    record = json.loads((logs / f"{node}-0.exit").read_text())
    return float(record["ended"] - record["started"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def trivial_runs(service: Service, api, runs: int) -> tuple[list[float], list[float]]:
    """Each run's submit → succeeded as the client saw it, and its launcher's life."""
    latencies, launchers = [], []
    spec = {"name": "trivial", "tasks": {"t": {"command": ["true"]}}}
    for _ in range(runs):
        started = time.perf_counter()
        run_id = submit(api, spec)
        seen, run = until_ended(api, run_id)
        assert run["state"] == "succeeded", run
        latencies.append(seen - started)
        launchers.append(launcher_seconds(service, run_id, "t", "t"))
    return latencies, launchers


def sweep_spec(n: int, delay_s: float) -> dict:
    settings = {"n": n, "delay_s": delay_s}
    return {"name": "sweep", "tasks": {"sq": {"type": "squares", "cores": 2, "settings": settings}}}


def harness_alone(service: Service, run_id: str, n: int, delay_s: float) -> float:
    """The same task run by ``simrun-worker`` as its coordinator, by hand: its wall time."""
    source = service.store / "runs" / run_id / "tasks" / "sq" / "task.json"
    task = json.loads(source.read_text())
    with tempfile.TemporaryDirectory() as scratch:
        task_dir = Path(scratch) / "store" / "runs" / "alone" / "tasks" / "sq"
        task_dir.mkdir(parents=True)
        (task_dir / "task.json").write_text(json.dumps({**task, "run": "alone"}))
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_")},
            "SIMRUN_TASK_DIR": str(task_dir),
            "SIMRUN_ROLE": "base",
            "SIMRUN_WORKER": "sq-w0",
            "SIMRUN_CORES": str(task["plan"]["cores"]),
            "SIMRUN_MEMORY_LIMIT_GB": str(task["plan"]["memory_gb"]),
            "SIMRUN_MEMORY_SOURCE": "process",
            "SIMRUN_SCRATCH": str(Path(scratch) / "scratch"),
        }
        worker = str(Path(sys.executable).parent / "simrun-worker")
        started = time.perf_counter()
        subprocess.run([worker], env=env, check=True, capture_output=True)
        seconds = time.perf_counter() - started
        merged = json.loads((task_dir / "out" / "squares.json").read_text())
        assert merged == [i * i for i in range(n)]
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--units", type=int, default=400)
    parser.add_argument("--delay", type=float, default=0.005, help="seconds per unit")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds measured idle (30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="simrun-bench-") as home:
        service = Service(home=Path(home) / "home")
        started = time.perf_counter()
        service.start()
        print(f"simrun serve started in {time.perf_counter() - started:.1f} s")
        try:
            time.sleep(SETTLE_S)
            share = idle_share(service, args.idle)
            print(f"idle serve over {args.idle:.0f} s: {100 * share:.1f}% of a core, all processes")
            with service.client(service.user("bench")) as api:
                trivial_runs(service, api, 2)  # warm up: imports, first connections
                latencies, launchers = trivial_runs(service, api, args.runs)
                median = statistics.median(latencies)
                verdict = "met" if median <= TARGET_S else "MISSED"
                print(
                    f"trivial run, submit → succeeded ({args.runs} runs): median {median:.3f} s, "
                    f"p95 {percentile(latencies, 0.95):.3f} s, "
                    f"min {min(latencies):.3f} s, max {max(latencies):.3f} s   "
                    f"target median ≤ {TARGET_S} s  {verdict}"
                )
                print(
                    f"  of which the launcher's life (wall and program): "
                    f"median {statistics.median(launchers):.3f} s"
                )
                begun = time.perf_counter()
                run_id = submit(api, sweep_spec(args.units, args.delay))
                seen, run = until_ended(api, run_id)
                assert run["state"] == "succeeded", run
                through_service = seen - begun
            alone = harness_alone(service, run_id, args.units, args.delay)
            print(
                f"squares n={args.units} delay_s={args.delay} on 2 cores: service "
                f"{through_service:.2f} s, harness alone {alone:.2f} s, "
                f"overhead {through_service - alone:.2f} s"
            )
        finally:
            service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
