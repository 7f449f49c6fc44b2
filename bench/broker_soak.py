"""Soak of the embedded default's broker: ``simrun serve`` under steady load for a while.

Submits a small run (three chained trivial tasks) every ``--interval`` seconds for
``--minutes`` minutes through the REST API of a serve with the embedded default (SQLite, the
broker in SQLite, the local backend), beside beat's polls, and prints: runs submitted and
how each ended, runs not ended, the worker's restarts and the CRITICAL lines of the service
(the filesystem broker's ``JSONDecodeError`` was one), and the broker file's size.
``--broker filesystem://`` runs the same against the old filesystem transport.

Run: ``.venv/bin/python bench/broker_soak.py --minutes 60`` (a temporary home of its own).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.service import ENDED, Service, run_of, submit  # noqa: E402

SPEC = {
    "name": "soak",
    "tasks": {
        "a": {"command": ["true"]},
        "b": {"command": ["true"], "inputs": {"a": "a"}},
        "c": {"command": ["true"], "inputs": {"b": "b"}},
    },
}


def soak(service: Service, api, minutes: float, interval_s: float) -> list[str]:
    """Submit a run every ``interval_s`` for ``minutes``; the runs submitted."""
    submitted = []
    end = time.monotonic() + minutes * 60
    while time.monotonic() < end:
        started = time.monotonic()
        submitted.append(submit(api, SPEC))
        time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    return submitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between runs")
    parser.add_argument("--broker", default="", help="CELERY_BROKER_URL (default: embedded)")
    parser.add_argument("--keep", action="store_true", help="keep the home and the log")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="simrun-soak-")
    try:
        extra = {"CELERY_BROKER_URL": args.broker} if args.broker else {}
        service = Service(home=Path(tmp) / "home", extra_env=extra)
        service.start()
        try:
            api = service.client(service.user("soak"))
            started = time.monotonic()
            submitted = soak(service, api, args.minutes, args.interval)
            deadline = time.monotonic() + 120
            states: collections.Counter[str] = collections.Counter()
            pending = list(submitted)
            while pending and time.monotonic() < deadline:
                pending = [r for r in pending if run_of(api, r)["state"] not in ENDED]
                time.sleep(1)
            for run_id in submitted:
                states[run_of(api, run_id)["state"]] += 1
            elapsed = time.monotonic() - started
        finally:
            service.stop()
        text = service.log.read_text(errors="replace")
        restarts = text.count("simrun: worker ended")
        critical = [line for line in text.splitlines() if "CRITICAL" in line]
        broker = service.home / "broker.sqlite3"
        print(f"broker {args.broker or 'embedded (SQLite)'}: {elapsed / 60:.1f} min")
        print(f"runs submitted {len(submitted)}; ended {dict(states)}; not ended {len(pending)}")
        print(f"worker restarts {restarts}; CRITICAL lines {len(critical)}")
        for line in critical[:5]:
            print(f"  {line}")
        if broker.exists():
            print(f"broker file {broker.stat().st_size / 1e6:.2f} MB")
    finally:
        if args.keep:
            print(f"home {service.home}; log {service.log}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
