"""Benchmark: the Slurm backend's load on the controller, on the real cluster of .ci/slurm.

    .venv/bin/python bench/slurm_load.py [--runs 1,10,100] [--tasks 5] [--periods 3]
        [--poll-s 30] [--gone]

For each count of live runs (``--runs``) of ``--tasks`` independent command tasks each, the
runs are submitted with their jobs held (``--hold``, so they stay in the queue and occupy no
node), then the control loop is imitated for ``--periods`` poll periods: each pass asks the
versions of every run, the status of each and the placements, as often as it likes. Prints
the Slurm commands of each poll and their seconds, the target beside them (constant, at most
2 a poll period), and what Nextflow's default (one ``squeue`` per user a minute) and
Snakemake's (one ``sacct`` per run a poll) would make for the same runs in the same period.
With ``--gone``, then the poll after every job of the runs ended and left the queue (Slurm's
MinJobAge after their end; 300 s on the cluster with accounting): one ``squeue`` and one
batched ``sacct`` for all of them. Then the latency of one task from ``sbatch`` to running,
as Slurm records it and as a poll every 0.5 s sees it. Needs root and the cluster (started
here with .ci/slurm).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")
os.environ.setdefault("SECRET_KEY", "bench")
django.setup()

from harness.tasktypes import task_types  # noqa: E402
from runs.backends.base import (  # noqa: E402
    ClusterConfig,
    RunRecord,
    TaskPlan,
    TaskRecord,
    workflow_name,  # noqa: E402
)
from runs.backends.slurm.backend import SlurmBackend  # noqa: E402
from runs.backends.slurm.commands import Slurm  # noqa: E402
from runs.backends.slurm.script import Placement  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLAN = TaskPlan(cores=1, memory_gb=0.1, base_gb=0, per_worker_gb=0.1, retry_memory_gb=0.2)


def start_cluster() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / ".ci/slurm")], capture_output=True, text=True, check=True
    )
    return done.stdout.strip().splitlines()[-1].partition("=")[2]


def backend(store: Path, conf: str, poll_s: float, hold: bool) -> SlurmBackend:
    extra = ("--hold",) if hold else ()
    return SlurmBackend(
        store,
        slurm=Slurm(conf=conf),
        where=Placement(partition="simrun", time_limit="10", extra=extra),
        poll_s=poll_s,
    )


def submit(b: SlurmBackend, run_id: str, tasks: int, command: str = "sleep 600") -> str:
    records = {
        f"t{i}": TaskRecord(id=f"t{i}", kind="command", command=["sh", "-c", command])
        for i in range(tasks)
    }
    for task in records:
        (b.store / "runs" / run_id / "tasks" / task).mkdir(parents=True, exist_ok=True)
    record = RunRecord(id=run_id, tasks=records, store=b.store)
    return b.submit(record, dict.fromkeys(records, PLAN), task_types(), ClusterConfig())


TARGET = 2
"""Slurm commands a poll period, at most, whatever the runs and tasks (issue 44)."""


def counted_polls(b: SlurmBackend) -> list[float]:
    """The times of the polls ``b`` makes from now on (each asks Slurm)."""
    polls: list[float] = []
    poll = b._poll

    def counting(now: float) -> bool:
        polls.append(now)
        return poll(now)

    b._poll = counting  # type: ignore[method-assign]
    return polls


def report(what: str, b: SlurmBackend, polls: int, poll_s: float, runs: int) -> None:
    """The commands of ``polls`` polls, per poll, beside the target and the other tools'."""
    calls = sum(b.slurm.calls.values()) / max(polls, 1)
    seconds = sum(b.slurm.seconds.values()) / max(polls, 1)
    verdict = "ok" if calls <= TARGET else "OVER"
    print(
        f"{what}: {calls:.2f} commands a poll (target <= {TARGET}, constant: {verdict}) "
        f"{dict(b.slurm.calls)} in {polls} polls, {seconds:.3f} s of them a poll; in the "
        f"same {poll_s:g} s Nextflow makes {poll_s / 60:.2f} squeue, Snakemake {runs} sacct"
    )


def load(conf: str, runs: int, tasks: int, periods: int, poll_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = backend(Path(tmp), conf, poll_s, hold=True)
        began = time.monotonic()
        names = [submit(b, f"load{runs}x{i}", tasks) for i in range(runs)]
        submitted = time.monotonic() - began
        try:
            b.poll(force=True)
            b.slurm.calls.clear()
            b.slurm.seconds.clear()
            polls = counted_polls(b)
            end = time.monotonic() + periods * poll_s
            passes = 0
            while time.monotonic() < end:
                b.versions(names)
                for name in names:
                    b.status(name)
                b.placements()
                passes += 1
                time.sleep(0.2)
            what = (
                f"{runs:>4} live runs x {tasks} tasks ({runs * tasks} jobs, submitted in "
                f"{submitted:.1f} s, {passes} passes of the loop)"
            )
            report(what, b, len(polls), poll_s, runs)
        finally:
            for name in names:
                b.cancel(name)


def gone(conf: str, counts: list[int], tasks: int, poll_s: float) -> None:
    """For each count of runs (a service of its own each), the poll after every job of its
    runs ended and Slurm forgot it: squeue, then one sacct for all of them, whose answer
    ends every run. The jobs of all counts run and are forgotten together."""
    with tempfile.TemporaryDirectory() as tmp:
        services = {
            runs: backend(Path(tmp) / str(runs), conf, poll_s, hold=False) for runs in counts
        }
        names = {
            runs: [submit(b, f"gone{runs}x{i}", tasks, "true") for i in range(runs)]
            for runs, b in services.items()
        }
        jobs = [
            j.job_id
            for runs, b in services.items()
            for n in names[runs]
            for j in b.ledger.read(n).jobs
        ]
        began = time.monotonic()
        b = services[counts[0]]
        while subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", ",".join(jobs), "-o", "%i"],
            env=b.slurm.env(),
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip():
            time.sleep(5)
        waited = time.monotonic() - began
        for runs, b in services.items():
            b.slurm.calls.clear()
            b.slurm.seconds.clear()
            b.poll(force=True)
            ended = sum(b.status(name).phase == "Succeeded" for name in names[runs])
            what = (
                f"{runs:>4} runs x {tasks} tasks ({runs * tasks} jobs) gone from the queue "
                f"({waited:.0f} s after the submissions), {ended} runs ended by the poll"
            )
            report(what, b, 1, poll_s, runs)


def latency(conf: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = backend(Path(tmp), conf, 0.5, hold=False)
        began = time.time()
        name = submit(b, "latency", 1, "sleep 5")
        try:
            while b.status(name).tasks.get("t0") != "Running":
                time.sleep(0.1)
            seen = time.time() - began
            [job] = b.ledger.read(name).jobs
            recorded = (job.started_at or 0) - job.submitted_at
            print(
                f"submit to running: {seen:.1f} s as a 0.5 s poll sees it, "
                f"{recorded:.1f} s as Slurm records it (whole seconds)"
            )
        finally:
            b.cancel(workflow_name("latency"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="1,10,100")
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--poll-s", type=float, default=30.0)
    parser.add_argument("--gone", action="store_true", help="the poll after jobs left")
    args = parser.parse_args()
    conf = start_cluster()
    counts = [int(runs) for runs in args.runs.split(",")]
    for runs in counts:
        load(conf, runs, args.tasks, args.periods, args.poll_s)
    if args.gone:
        gone(conf, counts, args.tasks, args.poll_s)
    latency(conf)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
