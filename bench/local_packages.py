"""numpy and scipy in ``environment.packages`` on a fresh ``simrun serve --demo`` (issue 36's
"Done when"), as a newcomer meets them.

Each repetition starts ``simrun serve --demo`` in a new, empty home on a free port, waits for
its banner (the demo user's token) and for the demo run to end, then submits through the API,
twice, the same run: its ``sources`` ship a split type ``gammas`` whose module does ``import
numpy, scipy`` at its top, and its ``environment`` is ``{packages: [numpy, scipy]}``. For each
run it prints, from the moment it was submitted (the client's clock, before the sources are
uploaded), the seconds to its first task running and to its success (the API's
``started_at``/``ended_at``), the seconds the environment's install took (the venv's mark,
``<store>/environments/<key>.json``), whether the run built anything (a new or rewritten mark,
an "installing" line in its tasks' logs) and what pip put into the venv (its own
``site-packages``: what the service's venv had already, numpy among it where pandas is
installed, is not installed again). The first run installs the packages while its shipped
type is learned, before it is planned; the second finds them installed.

Run: ``.venv/bin/python bench/local_packages.py [--repeat 3]``. pip reaches the packages as the
service's own would (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``/etc/pip.conf``); each
repetition's store is new, so its wheel cache is empty and scipy is fetched again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.first_start import BANNER, SIMRUN, env_of, free_port  # noqa: E402
from runs.backends.local import env as local_env  # noqa: E402
from runs.client.api import Client  # noqa: E402

START_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 900.0
POLL_S = 0.1
ENDED = {"succeeded", "failed", "cancelled"}
PACKAGES = ["numpy", "scipy"]
UNITS = 8

SOURCES = {
    "pyproject.toml": """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "gammas-sim"
version = "0.1.0"

[project.entry-points."simrun.task_types"]
gammas = "gammas_sim:TASK_TYPE"
""",
    "gammas_sim/__init__.py": """import numpy
import scipy
import scipy.special
from pydantic import BaseModel

from harness.tasktypes import TaskType


class GammasSettings(BaseModel):
    n: int = 4


def compute(settings, context, index):
    return float(scipy.special.gamma(index + 1) + numpy.sqrt(index))


def merge(settings, context):
    (context.out / "versions.txt").write_text(
        f"numpy {numpy.__version__} from {numpy.__file__}\\n"
        f"scipy {scipy.__version__} from {scipy.__file__}\\n"
        f"sum {sum(context.results):.3f}\\n"
    )


TASK_TYPE = TaskType(
    name="gammas",
    settings=GammasSettings,
    units=lambda s: s.n,
    compute=compute,
    merge=merge,
)
""",
}
"""A package shipping a split type ``gammas`` whose module imports numpy and scipy at its top."""


def spec() -> dict[str, Any]:
    return {
        "name": "gammas",
        "tasks": {"sweep": {"type": "gammas", "settings": {"n": UNITS}}},
        "environment": {"packages": PACKAGES},
        "sources": ["./gammas-pkg"],
    }


def write_sources(base: Path) -> None:
    for path, text in SOURCES.items():
        (base / "gammas-pkg" / path).parent.mkdir(parents=True, exist_ok=True)
        (base / "gammas-pkg" / path).write_text(text)


def seconds_of(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


class Serve:
    """``simrun serve --demo`` in a fresh home of ``base`` on a free port."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.store = self.home / "store"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = base / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start it; the demo user's API token, once the banner says where it runs."""
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [SIMRUN, "serve", "--demo", "--port", str(self.port)],
                cwd=self.base,
                env=env_of(self.home, ""),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            text = self.log.read_text(errors="replace")
            if BANNER in text and (found := re.search(r"API token (\w+)", text)):
                return found[1]
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"simrun serve --demo did not start: see {self.log}")
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Ctrl-C, as a terminal sends it (SIGINT to its group); SIGKILL if it stays."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def wait_ended(client: Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        run = dict(client.get(f"/api/runs/{run_id}/"))
        if run["state"] in ENDED:
            return run
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not end in {RUN_TIMEOUT_S:g} s: {run['state']}")
        time.sleep(POLL_S)


def marks(store: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """The marks of the built venvs of packages: by key, their mtime and content."""
    folder = store / local_env.ENVIRONMENTS
    return {
        mark.stem: (mark.stat().st_mtime_ns, json.loads(mark.read_text()))
        for mark in sorted(folder.glob("*.json"))
    }


def installed_in(venv: Path) -> list[str]:
    """The distributions pip installed into a venv of packages (its own site-packages)."""
    return sorted(
        d.name.removesuffix(".dist-info")
        for d in venv.glob("lib/python*/site-packages/*.dist-info")
    )


def task_logs(store: Path, run_id: str) -> str:
    return "\n".join(
        log.read_text(errors="replace")
        for log in sorted((store / "runs" / run_id / "tasks").glob("*/logs/*.log"))
    )


def one_run(serve: Serve, client: Client, sources: Path) -> dict[str, Any]:
    """Submit the run, wait for its end; what it cost and what it built."""
    before = marks(serve.store)
    submitted = time.time()
    answer = client.submit_text(json.dumps(spec()), base=sources, report=lambda _: None)
    run = wait_ended(client, answer["id"])
    if run["state"] != "succeeded":
        raise RuntimeError(
            f"run {run['id']} {run['state']}: {run.get('message')} (see {serve.log})"
        )
    after = marks(serve.store)
    starts = [s for s in (seconds_of(t["started_at"]) for t in run["tasks"]) if s is not None]
    built = {key: mark for key, mark in after.items() if before.get(key) != mark}
    logs = task_logs(serve.store, run["id"])
    versions = serve.store / "runs" / run["id"] / "tasks" / "sweep" / "out" / "versions.txt"
    return {
        "run": run["id"],
        "running": min(starts) - submitted,
        "succeeded": float(seconds_of(run["ended_at"]) or 0.0) - submitted,
        "built": {key: mark[1] for key, mark in built.items()},
        "installing in its logs": "installing the environment's packages" in logs,
        "installed already in its logs": "the environment's packages are installed already" in logs,
        "versions": versions.read_text().strip().splitlines(),
    }


def repetition(number: int) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="simrun-bench-packages-"))
    serve = Serve(base)
    try:
        started = time.monotonic()
        token = serve.start()
        banner = time.monotonic() - started
        write_sources(base)
        with Client(serve.url, token) as client:
            [demo] = client.get("/api/runs/")["results"]
            demo = wait_ended(client, demo["id"])
            demo_s = time.monotonic() - started
            print(f"#{number}: banner after {banner:.1f} s, the demo run {demo['state']} after "
                  f"{demo_s:.1f} s", flush=True)  # fmt: skip
            first = one_run(serve, client, base)
            second = one_run(serve, client, base)
        [(key, (_, mark))] = marks(serve.store).items()
        first["environment_s"] = float(mark["seconds"])
        first["installed"] = installed_in(serve.store / local_env.ENVIRONMENTS / key)
        said = serve.log.read_text(errors="replace")
        first["pip said"] = re.findall(r"Successfully installed ([\w.\- ]+)", said)
        return {"first": first, "second": second}
    finally:
        serve.stop()
        shutil.rmtree(base, ignore_errors=True)


def show(number: int, result: dict[str, Any]) -> None:
    first, second = result["first"], result["second"]
    installed = ", ".join(first["installed"])
    said = "; ".join(first["pip said"])
    print(f"#{number} first:  running {first['running']:.1f} s, succeeded "
          f"{first['succeeded']:.1f} s, environment built in {first['environment_s']:.1f} s "
          f"(in its venv: {installed}; pip: Successfully installed {said})")  # fmt: skip
    print(f"{'':>3}         {' | '.join(first['versions'])}")
    print(f"#{number} second: running {second['running']:.1f} s, succeeded "
          f"{second['succeeded']:.1f} s, built {len(second['built'])} environment(s) "
          f"(installing in its logs: {second['installing in its logs']}, installed already: "
          f"{second['installed already in its logs']})", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} cores, load average before: "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (a shared machine)")  # fmt: skip
    results = []
    for number in range(1, args.repeat + 1):
        result = repetition(number)
        show(number, result)
        results.append(result)
    figures = {
        "first running": [r["first"]["running"] for r in results],
        "first succeeded": [r["first"]["succeeded"] for r in results],
        "first environment": [r["first"]["environment_s"] for r in results],
        "second running": [r["second"]["running"] for r in results],
        "second succeeded": [r["second"]["succeeded"] for r in results],
    }
    print("median: " + ", ".join(f"{k} {statistics.median(v):.1f} s" for k, v in figures.items()))
    rebuilt = sum(len(r["second"]["built"]) for r in results)
    print(f"second runs that built an environment: {rebuilt} of {len(results)}")
    return 0 if rebuilt == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
