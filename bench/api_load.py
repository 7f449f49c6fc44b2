"""Benchmark: the runs list and a run's detail under load, on a real server and PostgreSQL.

    .venv/bin/python bench/api_load.py [--runs 100000] [--clients 16] [--seconds 30]

Fills a database of its own (``simrun_bench`` by default, ``BENCH_DATABASE_URL`` to change
it) with generated runs of 3 tasks each, unless it holds that many already; starts gunicorn
as ``simrun serve`` does (gthread workers) against it; then, for each page, ``--clients``
threads call it for ``--seconds`` over keep-alive connections, each waiting for its answer
before the next request (closed loop). Prints requests per second, p50, p95 and p99 in
milliseconds. The pages: the API's runs list and a run's detail (token), and the
dashboard's runs table and run page (session), as a staff user who sees every run and as
a user who sees their own. Target: p95 <= 50 ms for the list.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
DATABASE = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://simrun:simrun@127.0.0.1:5432/simrun_bench"
)
HOME = Path(tempfile.mkdtemp(prefix="simrun-bench-api-"))
ENV = {
    "DATABASE_URL": DATABASE,
    "SECRET_KEY": "bench-only",
    "SIMRUN_BACKEND": "fake",
    "SIMRUN_HOME": str(HOME),
    "DJANGO_SETTINGS_MODULE": "simrun_site.settings",
    "LOG_LEVEL": "WARNING",
}
USERS = 20
BATCH = 5000
STATES = ["succeeded"] * 80 + ["failed"] * 12 + ["cancelled"] * 6 + ["running"] * 2
SPEC = {
    "name": "bench",
    "tasks": {
        "sweep": {"type": "squares", "settings": {"n": 1000}, "workers": 4},
        "stats": {"type": "csv-stats", "inputs": {"table": "sweep"}},
        "report": {"command": ["echo", "done"], "inputs": {"stats": "stats"}},
    },
}
PLAN = {
    "cores": 2,
    "memory_gb": 0.45,
    "workers": 4,
    "base_gb": 0.25,
    "per_worker_gb": 0.1,
    "processes": 2,
    "retry_memory_gb": 0.9,
    "coordinator_merges": False,
    "why": "per-worker memory: default of squares; retry memory 2.0x the memory",
}


def setup_django() -> None:
    os.environ.update(ENV)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def create_database() -> None:
    import psycopg

    parts = urlsplit(DATABASE)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def seed(runs: int) -> None:
    """Users, ``runs`` runs of 3 tasks with attempts, unless the database has them already."""
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from runs.models import Attempt, Run, Task

    call_command("migrate", verbosity=0)
    if Run.objects.count() == runs:
        return
    print(f"seeding {runs} runs of 3 tasks ...", flush=True)
    started = time.monotonic()
    Run.objects.all().delete()
    User.objects.filter(username__startswith="bench").delete()
    users = [User.objects.create_user(f"bench{i}", password="bench") for i in range(USERS)]
    User.objects.filter(username="bench0").update(is_staff=True)
    now = timezone.now()
    rng = random.Random(7)
    for start in range(0, runs, BATCH):
        batch = []
        for i in range(start, min(runs, start + BATCH)):
            state = rng.choice(STATES)
            created = now - timedelta(seconds=(runs - i) * 300)
            batch.append(
                Run(
                    owner=users[i % USERS],
                    name=f"sweep-{i}",
                    spec=SPEC,
                    backend="fake",
                    state=state,
                    message="task sweep: unit 17 failed" if state == "failed" else "",
                    workflow=f"simrun-bench{i}",
                    created_at=created,
                    submitted_at=created,
                    ended_at=None if state == "running" else created + timedelta(minutes=3),
                )
            )
        made = Run.objects.bulk_create(batch)
        tasks = []
        for run in made:
            done = run.state == "succeeded"
            for position, (task_id, kind, units) in enumerate(
                [("sweep", "split", 1000), ("stats", "plugin", 1), ("report", "command", 1)]
            ):
                tasks.append(
                    Task(
                        run=run,
                        task_id=task_id,
                        kind=kind,
                        type={"split": "squares", "plugin": "csv-stats"}.get(kind, ""),
                        plan=PLAN,
                        state="done" if done else "running" if run.state == "running" else "failed",
                        units_done=units if done else units // 2,
                        units_total=units,
                        position=position,
                    )
                )
        made_tasks = Task.objects.bulk_create(tasks)
        Attempt.objects.bulk_create(
            Attempt(task=t, worker=f"{t.task_id}-w0", attempt=0, phase="Succeeded", exit_code=0)
            for t in made_tasks
        )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"seeded in {time.monotonic() - started:.0f} s", flush=True)


def credentials(username: str) -> tuple[str, str]:
    """An API token and a session cookie of a user."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    from runs.api.authentication import create_token

    user = User.objects.get(username=username)
    _, token = create_token(user)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return token, f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "simrun_site.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "gthread",
        "--threads",
        str(threads),
        "--keep-alive",
        "30",
        "--log-level",
        "warning",
    ]
    # The settings keep PostgreSQL connections between requests (CONN_MAX_AGE), as served.
    server = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **ENV})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("gunicorn did not start")


@dataclass
class Result:
    name: str
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        ordered = sorted(self.latencies)

        def quantile(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

        rate = len(ordered) / self.seconds
        return (
            f"{self.name:<34} {rate:8.0f} req/s  p50 {quantile(0.5):6.1f} ms  "
            f"p95 {quantile(0.95):6.1f} ms  p99 {quantile(0.99):6.1f} ms  "
            f"mean {statistics.fmean(ordered) * 1000:6.1f} ms  errors {self.errors}"
        )


def load(
    name: str, port: int, paths: list[str], headers: dict[str, str], clients: int, seconds: float
) -> Result:
    """``clients`` threads, each on a keep-alive connection, calling ``paths`` in turn."""
    result = Result(name)
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    warm = time.monotonic() + min(2.0, seconds / 10)

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        errors = 0
        i = number
        while (now := time.monotonic()) < stop:
            path = paths[i % len(paths)]
            i += 1
            began = time.perf_counter()
            try:
                connection.request("GET", path, headers=headers)
                response = connection.getresponse()
                response.read()
                ok = response.status in (200, 286)
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                ok = False
            elapsed = time.perf_counter() - began
            if now >= warm:
                if ok:
                    mine.append(elapsed)
                else:
                    errors += 1
        connection.close()
        with lock:
            result.latencies.extend(mine)
            result.errors += errors

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = seconds - (warm - (stop - seconds))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn process")
    parser.add_argument("--only", help="run only the pages whose name contains this")
    args = parser.parse_args(argv)

    create_database()
    setup_django()
    seed(args.runs)
    from runs.models import Run

    staff_token, staff_cookie = credentials("bench0")
    user_token, user_cookie = credentials("bench1")
    run_ids = list(Run.objects.order_by("?").values_list("id", flat=True)[:200])
    own_ids = list(
        Run.objects.filter(owner__username="bench1")
        .order_by("?")
        .values_list("id", flat=True)[:200]
    )
    from django.db import connections

    connections.close_all()

    port = free_port()
    server = start_server(port, args.workers, args.threads)
    cases = [
        ("API runs list (staff, 100k)", ["/api/runs/"], {"Authorization": f"Token {staff_token}"}),
        ("API runs list (user, 5k)", ["/api/runs/"], {"Authorization": f"Token {user_token}"}),
        (
            "API runs list, filtered (staff)",
            ["/api/runs/?state=failed&name=sweep-9"],
            {"Authorization": f"Token {staff_token}"},
        ),
        (
            "API run detail (staff)",
            [f"/api/runs/{i}/" for i in run_ids],
            {"Authorization": f"Token {staff_token}"},
        ),
        (
            "API run detail (user)",
            [f"/api/runs/{i}/" for i in own_ids],
            {"Authorization": f"Token {user_token}"},
        ),
        ("dashboard runs table (staff)", ["/runs/table/"], {"Cookie": staff_cookie}),
        ("dashboard run page (staff)", [f"/runs/{i}/" for i in run_ids], {"Cookie": staff_cookie}),
    ]
    print(
        f"{args.runs} runs, {args.clients} clients, {args.seconds:.0f} s each, gunicorn "
        f"{args.workers} workers x {args.threads} threads, {os.cpu_count()} CPUs",
        flush=True,
    )
    try:
        for name, paths, headers in cases:
            if args.only and args.only not in name:
                continue
            print(load(name, port, paths, headers, args.clients, args.seconds).line(), flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
