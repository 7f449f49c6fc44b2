"""docs/task-types.md's walkthrough, as a user follows it: a task type of their own, shipped
only in the run's ``sources``, run by a ``simrun serve`` whose environment does not have it."""

from __future__ import annotations

import os
import re
import subprocess
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

from runs.client.packing import pack
from tests.e2e.service import SIMRUN, Service, submit, wait_until_ended
from tests.walkthrough import write_plugin_package, write_walkthrough

SUBMIT_TIMEOUT_S = 300


def simrun_submit(service: Service, token: str, spec: Path) -> subprocess.CompletedProcess[str]:
    """``simrun submit SPEC --follow`` as the user runs it, beside the spec."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SIMRUN_", "DJANGO_"))}
    env = {**clean, "SIMRUN_URL": service.url, "SIMRUN_TOKEN": token}
    return subprocess.run(
        [SIMRUN, "submit", spec.name, "--follow"],
        cwd=spec.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT_S,
    )


def run_id(output: str) -> str:
    found = re.search(r"submitted run (\S+)", output)
    assert found, output
    return found[1]


def test_a_task_type_shipped_in_the_sources_runs_without_an_install(
    sqlite_service: Service, token: str, tmp_path: Path
) -> None:
    with pytest.raises(PackageNotFoundError):
        distribution("decay-sim")  # the service's environment is this one: no decay in it
    spec = write_walkthrough(tmp_path)

    first = simrun_submit(sqlite_service, token, spec)

    assert first.returncode == 0, first.stdout + first.stderr
    run = run_id(first.stdout)
    task = sqlite_service.store / "runs" / run / "tasks" / "decay"
    assert (task / "out" / "decay.csv").read_text() == "rate,value\n0.1,0.2\n0.2,0.4\n0.5,1.0\n"
    log = next((task / "logs").glob("*-0.log")).read_text()
    installed = [line for line in log.splitlines() if "installed the sources" in line]
    assert len(installed) == 1 and "Successfully" not in log and "Processing" not in log, log
    (learned,) = (sqlite_service.store / "learned-types").glob("*/types.json")
    ready = learned.parent / "venv" / ".simrun-ready"
    before = (learned.stat().st_mtime_ns, ready.stat().st_mtime_ns)

    second = simrun_submit(sqlite_service, token, spec)

    assert second.returncode == 0, second.stdout + second.stderr
    assert run_id(second.stdout) != run
    assert (learned.stat().st_mtime_ns, ready.stat().st_mtime_ns) == before  # no second build
    with pytest.raises(PackageNotFoundError):
        distribution("decay-sim")


def test_a_plugin_type_shipped_in_the_sources_runs_its_command(
    sqlite_service: Service, token: str, tmp_path: Path
) -> None:
    package = write_plugin_package(tmp_path)
    with sqlite_service.client(token) as client:
        uploaded = client.post(
            "snapshots/",
            params={"name": package.name},
            content=pack(package),
            headers={"Content-Type": "application/gzip"},
        )
        assert uploaded.status_code in {200, 201}, uploaded.text
        spec = {
            "tasks": {"tally": {"type": "tally", "settings": {"word": "two"}}},
            "sources": [uploaded.json()["id"]],
        }
        run = wait_until_ended(client, submit(client, spec))

    assert run["state"] == "succeeded", run
    out = sqlite_service.store / "runs" / run["id"] / "tasks" / "tally" / "out" / "tally.txt"
    assert out.read_text() == "two\n"
