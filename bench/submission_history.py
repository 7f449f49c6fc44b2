"""Benchmark: what a submission reads of the observations, as their history grows.

    .venv/bin/python bench/submission_history.py [--repeat 5] [--baseline DIR] [10000 1000000]

For each size it fills a database of its own (``simrun_bench_submission``, created when
missing; ``BENCH_DATABASE_URL`` to change it) with that many observations of 100 keys (the
shipped ``squares`` and ``csv-stats`` and 98 command keys) and times, in a process of its
own, the median of 7 calls of each read a submission makes: the sizing prior's evidence
(``runs.planning.evidence.prior_evidence``), the latest observations of the run's types
(``runs.planning.submission.observed_peaks``), and a whole submission of a three-task run
(``create_run``, fake backend). Prints milliseconds.
Target: reads whose cost does not grow with the history.

``--baseline DIR`` times another checkout of the code (``git archive`` of a commit,
unpacked) beside this one, on a database of its own (the name with ``_baseline``) that its
code migrates and that holds the same observations; the repetitions alternate the two and
the medians over them are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
DATABASE = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://simrun:simrun@127.0.0.1:5432/simrun_bench_submission"
)
CALLS = 7
SPEC = """
name: history
tasks:
  sweep: {type: squares, settings: {n: 100}, workers: 2}
  stats: {type: csv-stats, inputs: {table: sweep}}
  plot: {command: [echo, plot], inputs: {stats: stats}}
"""
SEED = """
INSERT INTO runs_observation (task_type, worker, attempt, processes, per_worker_gb,
    peak_bytes, limit_bytes, units, unit_seconds, cpu_seconds, oom, from_report, created_at,
    seconds)
SELECT CASE WHEN i % 5 < 2 THEN 'squares' WHEN i % 5 = 2 THEN 'csv-stats'
            ELSE 'command:history/step-' || (i % 98) END,
       'w' || (i % 64), 0, 1 + i % 4, 0.5,
       100000000 + (i::bigint * 7919) % 900000000, 2000000000, 10, 0.1, 1.0, i % 53 = 0,
       true, timestamptz '2025-01-01' + i * interval '30 seconds', 60
FROM generate_series(1, %s) AS i
"""


def admin_url(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(path="/postgres").geturl().replace("postgres://", "postgresql://", 1)


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def prepared(url: str, code: Path, size: int) -> None:
    """The database of ``url``, migrated by ``code``, holding exactly ``size`` observations."""
    import psycopg

    name = database_name(url)
    with psycopg.connect(admin_url(url), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    environment = {**os.environ, **child_environment(url)}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=code, env=environment, check=True
    )
    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        held = conn.execute("SELECT COUNT(*) FROM runs_observation").fetchone()
        if held is None or held[0] != size:
            print(f"seeding {size} observations into {name} ...", flush=True)
            conn.execute("TRUNCATE runs_observation")
            conn.execute(SEED.replace("%s", str(size)))
            conn.execute("VACUUM ANALYZE runs_observation")


def child_environment(url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "SECRET_KEY": "bench-only",
        "SIMRUN_BACKEND": "fake",
        "SIMRUN_HOME": tempfile.mkdtemp(prefix="simrun-bench-submission-"),
        "DJANGO_SETTINGS_MODULE": "simrun_site.settings",
        "LOG_LEVEL": "WARNING",
    }


def measure() -> dict[str, float]:
    """In the child: the median milliseconds of each read, with the code on ``sys.path``."""
    import django

    django.setup()
    from django.contrib.auth.models import User

    from harness.tasktypes import task_types
    from runs.planning.evidence import prior_evidence
    from runs.planning.spec_document import parse_spec
    from runs.planning.submission import create_run, observed_peaks

    types = task_types()
    owner, _ = User.objects.get_or_create(username="bench")
    keys = {"squares", "csv-stats", "command:history/plot"}
    reads = {
        "evidence": lambda: prior_evidence(types),
        "latest": lambda: observed_peaks(keys),
        "submission": lambda: create_run(
            spec=parse_spec(SPEC, types=types), owner=owner, schedule=lambda run_id: None
        ),
    }
    figures = {}
    for name, read in reads.items():
        read()  # a first call warms the connection and the caches
        times = []
        for _ in range(CALLS):
            began = time.perf_counter()
            read()
            times.append(time.perf_counter() - began)
        figures[name] = statistics.median(times) * 1000
    return figures


def measured(url: str, code: Path) -> dict[str, float]:
    """The figures of ``code`` against ``url``, from a process of its own."""
    environment = {**os.environ, **child_environment(url), "PYTHONPATH": str(code)}
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure"],
        cwd=code,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[10_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure()))
        return 0
    sides = [("this", DATABASE, ROOT)]
    if args.baseline:
        sides.append(("baseline", f"{DATABASE}_baseline", args.baseline.resolve()))
    for size in args.sizes:
        for _, url, code in sides:
            prepared(url, code, size)
        runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in sides}
        for repetition in range(args.repeat):
            order = sides if repetition % 2 == 0 else sides[::-1]
            for label, url, code in order:
                runs[label].append(measured(url, code))
        print(f"\n{size} observations, medians of {args.repeat} interleaved repetition(s):")
        for label, figures in runs.items():
            medians = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
            print(
                f"  {label:>8}  evidence {medians['evidence']:8.1f} ms  "
                f"latest {medians['latest']:8.1f} ms  submission {medians['submission']:8.1f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
