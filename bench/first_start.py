"""A fresh home's first start of ``simrun serve --demo``, as the README's first command.

Each repetition starts ``simrun serve --demo`` in a new, empty home and measures, from the
moment the command is started:

- ``banner``: its banner ("simrun is running at") is printed;
- ``200``: the dashboard's login page first answers 200;
- ``running``: the demo run first has a task ``running`` in the API (with the token the
  banner prints);
- ``cpu``: the CPU seconds its processes had spent by then (serve, its children and theirs:
  its session; the run's tasks have sessions of their own), no target;
- ``stop``: then Ctrl-C (SIGINT to its process group) until the command exited, and the
  lines it printed meanwhile.

Variants (``--variant NAME=PYTHONPATH``, e.g. a ``git worktree`` of an older commit) are
interleaved, each repetition in another order, so a machine that slows down weighs on all
alike; the medians are printed. Targets: ``200`` (serve to its first answer) within 2 s (issue
48), ``running`` under 10 s and ``stop`` under 3 s with one line (issue 29).

Run: ``.venv/bin/python bench/first_start.py [--repeat 5] [--variant before=/tmp/old]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.service import service_processes  # noqa: E402

SIMRUN = str(Path(sys.executable).parent / "simrun")
CONFIGURATION = ("SIMRUN_", "CELERY_", "DJANGO_", "DATABASE_URL", "SECRET_KEY", "DEBUG")
TIMEOUT_S = 120.0
POLL_S = 0.05
BANNER = "simrun is running at"
TARGETS_S = {"200": 2.0, "running": 10.0, "stop": 3.0}
"""The largest median seconds allowed: to the first answer (issue 48), to a running task and
to the end of a Ctrl-C (issue 29)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def env_of(home: Path, pythonpath: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
    clean["SIMRUN_HOME"] = str(home)
    if pythonpath:
        clean["PYTHONPATH"] = pythonpath
    return clean


def first_start(pythonpath: str) -> dict[str, float | str]:
    """One fresh start: seconds to the banner, the first 200, the first running task, the stop."""
    base = Path(tempfile.mkdtemp(prefix="first-start-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = base / "serve.log"
    found: dict[str, float | str] = {}
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [SIMRUN, "serve", "--demo", "--port", str(port)],
            cwd=base,
            env=env_of(base / "home", pythonpath),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with httpx.Client(base_url=url, timeout=5) as client:
            token = ""
            while not {"banner", "200", "running"} <= found.keys():
                # Each time is taken when its check answered: a request the kernel queued
                # before a web worker was up answers only once one is.
                if time.monotonic() - started > TIMEOUT_S or process.poll() is not None:
                    raise RuntimeError(f"no first start: see {log}")
                text = log.read_text(errors="replace")
                if "banner" not in found and BANNER in text:
                    found["banner"] = time.monotonic() - started
                    token = re.search(r"API token (\w+)", text).group(1)  # type: ignore[union-attr]
                if "200" not in found and answers(client):
                    found["200"] = time.monotonic() - started
                if token and "running" not in found and running(client, token):
                    found["running"] = time.monotonic() - started
                    found["cpu"] = session_cpu(process.pid)
                time.sleep(POLL_S)
        before = len(log.read_text(errors="replace").splitlines())
        stopping = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: a terminal signals the whole group
        process.wait(timeout=60)
        found["stop"] = time.monotonic() - stopping
        said = log.read_text(errors="replace").splitlines()[before:]
        found["stop lines"] = len(said)
        if len(said) > 1:
            found["said"] = " | ".join(said)[:400]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    shutil.rmtree(base, ignore_errors=True)
    return found


def session_cpu(session: int) -> float:
    """CPU seconds of the processes of a session, with those of their children they waited for."""
    ticks = 0
    for pid in service_processes(session):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def answers(client: httpx.Client) -> bool:
    """Whether the dashboard's login page is a 200."""
    try:
        return client.get("/login/").status_code == 200
    except httpx.TransportError:
        return False


def running(client: httpx.Client, token: str) -> bool:
    """Whether a task of the demo run (the only run) is running."""
    headers = {"Authorization": f"Token {token}"}
    try:
        runs = client.get("/api/runs/", headers=headers).json()["results"]
        if not runs:
            return False
        run = client.get(f"/api/runs/{runs[0]['id']}/", headers=headers).json()
    except (httpx.TransportError, ValueError, KeyError):
        return False
    return any(task["state"] == "running" for task in run["tasks"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=PYTHONPATH: the code to start (default: this checkout)",
    )
    args = parser.parse_args(argv)
    variants = dict(v.split("=", 1) for v in args.variant) or {"this": ""}
    results: dict[str, list[dict[str, float | str]]] = {name: [] for name in variants}
    names = list(variants)
    for repetition in range(args.repeat):
        order = names[repetition % len(names) :] + names[: repetition % len(names)]
        for name in order:
            result = first_start(variants[name])
            results[name].append(result)
            shown = "  ".join(f"{k} {v:.2f}" for k, v in result.items() if isinstance(v, float))
            print(f"{name:>10} #{repetition + 1}: {shown}  stop lines {result['stop lines']}")
            if "said" in result:
                print(f"{'':>10}     at the stop: {result['said']}")
    for name, found in results.items():
        medians = {
            key: statistics.median(float(r[key]) for r in found)
            for key in ("banner", "200", "running", "cpu", "stop", "stop lines")
        }
        print(f"{name:>10} median: " + "  ".join(f"{k} {v:.2f}" for k, v in medians.items()))
        verdicts = [
            f"{key} ≤ {limit:g} s {'met' if medians[key] <= limit else 'MISSED'}"
            for key, limit in TARGETS_S.items()
        ]
        print(f"{'':>10} targets: " + ", ".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
