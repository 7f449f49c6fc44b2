"""Benchmark: one reconcile pass over many live runs on PostgreSQL, with the fake backend.

    DATABASE_URL=postgres://simrun:simrun@127.0.0.1:5432/simrun_bench_controller \\
        .venv/bin/python bench/reconcile_scale.py 1000 10000

For each size it creates that many live runs of 5 tasks (a split task of 3 workers, two
plugin tasks, two command tasks) in a database of its own (created when missing, emptied
first), gives each a running workflow in the fake backend and times passes: the first
(every task state written), the second (the records as the first wrote them), steady ones
(nothing changed: the common pass; their median is the figure), one where a tenth of the
runs changed, and a full poll of every run (what a resync or a restarted service costs).
Prints seconds, milliseconds and database queries per run, and the backend's calls per
pass (the fake counts them; on Argo each status is a request without the watch's cache).
Targets: a steady pass at 10,000 runs within 1 s, queries and backend calls per steady pass
that do not grow with the runs.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

os.environ.setdefault(
    "DATABASE_URL", "postgres://simrun:simrun@127.0.0.1:5432/simrun_bench_controller"
)
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")
os.environ["SIMRUN_BACKEND"] = "fake"
os.environ["SIMRUN_HOME"] = tempfile.mkdtemp(prefix="simrun-bench-")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TASKS_PER_RUN = 5
SPEC = {
    "tasks": {
        "sweep": {"type": "squares", "settings": {"n": 100}, "workers": 3},
        "stats": {"type": "csv-stats", "inputs": {"table": "sweep"}},
        "more": {"type": "csv-stats", "inputs": {"table": "sweep"}},
        "plot": {"command": ["echo", "plot"], "inputs": {"stats": "stats"}},
        "report": {"command": ["echo", "report"], "inputs": {"stats": "more"}},
    }
}
NODES = {
    "sweep-w0": "Running",
    "sweep-extra(0:1)": "Running",
    "sweep-extra(1:2)": "Pending",
}


def create_database(url: str) -> None:
    """Create the benchmark's database when it does not exist."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def populate(count: int, backend) -> None:
    """``count`` running runs of 5 tasks with a running workflow each."""
    from django.contrib.auth.models import User

    from harness.tasktypes import task_types
    from runs.backends.base import BackendStatus
    from runs.models import Run, RunState, Task
    from runs.planner import plan_run
    from runs.spec import task_kind, validate_spec

    Run.objects.all().delete()
    owner, _ = User.objects.get_or_create(username="bench")
    types = task_types()
    spec = validate_spec(SPEC, types=types)
    plans = plan_run(spec, types=types, extra_workers=backend.extra_workers)
    runs = [
        Run(owner=owner, spec=spec.dump(), backend="fake", state=RunState.RUNNING)
        for _ in range(count)
    ]
    for run in runs:
        run.workflow = f"simrun-{run.id}"
    Run.objects.bulk_create(runs, batch_size=2000)
    tasks = [
        Task(
            run=run,
            task_id=task_id,
            kind=task_kind(task, types),
            type=task.type or "",
            settings=task.settings or {},
            command=task.command or [],
            inputs=task.inputs,
            plan=plans[task_id].model_dump(mode="json"),
            units_total=100 if task_id == "sweep" else 1,
            position=position,
        )
        for run in runs
        for position, (task_id, task) in enumerate(spec.tasks.items())
    ]
    Task.objects.bulk_create(tasks, batch_size=5000)
    backend._memory.workflows = {
        run.workflow: BackendStatus(phase="Running", tasks=dict(NODES)) for run in runs
    }


def timed_pass(backend) -> tuple[float, int, int]:
    """Seconds, queries and backend calls of one reconcile (the lock included)."""
    from django.db import connection

    from runs import controller

    queries = 0

    def count(execute, sql, params, many, context):
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    calls = len(backend._memory.calls)
    with connection.execute_wrapper(count):
        start = time.perf_counter()
        controller.reconcile(backend=backend)
        seconds = time.perf_counter() - start
    return seconds, queries, len(backend._memory.calls) - calls


STEADY_PASSES = 5


def forget_polls() -> None:
    """Lose what the loop remembers of its polls, as a restarted service does (where it can)."""
    try:
        from runs import unchanged
    except ImportError:  # a checkout from before the poll memory: every pass polls in full
        return
    unchanged._memories.clear()


def bench(count: int) -> None:
    from runs.backends.fake import FakeBackend

    backend = FakeBackend()
    start = time.perf_counter()
    populate(count, backend)
    created = time.perf_counter() - start
    print(f"\n{count} live runs x {TASKS_PER_RUN} tasks (created in {created:.1f} s)")
    rows = [("first pass (all tasks written)", timed_pass(backend))]
    rows += [("second pass (records as written)", timed_pass(backend))]
    steady = [timed_pass(backend) for _ in range(STEADY_PASSES)]
    rows += [(f"steady pass {i + 1} (nothing changed)", s) for i, s in enumerate(steady)]
    names = list(backend._memory.workflows)
    for name in names[::10]:
        backend.set_nodes(name, {"stats": "Running"})
    rows += [("a tenth of the runs changed", timed_pass(backend))]
    forget_polls()
    rows += [("full poll (resync, restart)", timed_pass(backend))]
    for label, (seconds, queries, calls) in rows:
        print(
            f"  {label:36} {seconds:7.2f} s  {seconds / count * 1000:6.3f} ms/run  "
            f"{queries / count:6.3f} queries/run  {calls:6d} backend calls"
        )
    seconds, queries, calls = sorted(steady)[len(steady) // 2]
    print(
        f"  steady pass, median of {STEADY_PASSES}: {seconds:.3f} s, "
        f"{seconds / count * 1000:.3f} ms/run, {queries / count:.4f} queries/run, "
        f"{calls} backend calls/pass (target: <= 1 s at 10,000 runs)"
    )


def main(argv: list[str]) -> int:
    import django
    from django.core.management import call_command

    create_database(os.environ["DATABASE_URL"])
    django.setup()
    call_command("migrate", verbosity=0)
    for size in [int(a) for a in argv] or [1000, 10000]:
        bench(size)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
