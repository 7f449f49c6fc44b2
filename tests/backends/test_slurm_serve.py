"""The README's demo through a real ``SIMRUN_BACKEND=slurm simrun serve`` on the cluster of
``.ci/slurm``: the service as root for a team, the user mapped to a Unix login, every task a
Slurm job of that login, the run's results table at its end; then a run whose packages a
job of that login builds."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from runs.backends.base import workflow_name
from runs.backends.slurm.packages import BUILD_NODE
from tests.backends.packages import write_wheel
from tests.backends.slurm_cluster import PARTITION, TEAM_LOGIN, cluster
from tests.e2e.service import submit, task_user_serve, wait_until_ended

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="the team mode is a root service's"),
]
DEMO = Path(__file__).resolve().parents[2] / "docs" / "examples" / "demo.yaml"
IMPORTS = ["python", "-c", "import pkgdemo; print('answer', pkgdemo.ANSWER)"]
PACKAGES = {
    "name": "packages",
    "environment": {"packages": ["pkgdemo"]},
    "tasks": {"use": {"command": IMPORTS}},
}
UID_BASE = 390000
"""The local backend's task users (unused on Slurm; serve checks them all the same)."""


@pytest.fixture
def index() -> Iterator[Path]:
    """pip's only index, with ``pkgdemo``, in a folder of /tmp the login may read."""
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    folder.chmod(0o755)
    write_wheel(folder, "pkgdemo", {"pkgdemo/__init__.py": "ANSWER = 42\n"})
    yield folder
    shutil.rmtree(folder)


def test_the_readmes_demo_and_a_run_with_packages_succeed_through_simrun_serve_on_slurm(index):
    slurm = {
        "PIP_FIND_LINKS": str(index),
        "PIP_NO_INDEX": "1",
        "SIMRUN_BACKEND": "slurm",
        "SIMRUN_SLURM_CONF": cluster(),
        "SIMRUN_SLURM_PARTITION": PARTITION,
        "SIMRUN_SLURM_TIME_LIMIT": "10",
        "SIMRUN_SLURM_POLL_S": "1",
        "SIMRUN_POLL_S": "1",
    }
    with task_user_serve(UID_BASE, **slurm) as service:
        banner = service.log.read_text()
        assert "backend slurm (team mode" in banner
        done = subprocess.run(
            [service.simrun, "user", "alice", "--login", TEAM_LOGIN],
            env=service.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        token = done.stdout.split("token: ")[1].split()[0]
        with service.client(token) as alice:
            run_id = submit(alice, yaml.safe_load(DEMO.read_text()))
            run = wait_until_ended(alice, run_id, timeout_s=300, interval_s=1)
            assert run["state"] == "succeeded", run
            table = alice.get(f"runs/{run_id}/tasks/sweep/results/")
            assert table.status_code == 200, table.text
            assert table.json()["count"] == 24
        ledger = service.store / "slurm" / "runs" / f"{workflow_name(run_id)}.json"
        jobs = json.loads(ledger.read_text())["jobs"]
        assert {job["node"] for job in jobs} >= {"sweep-w0", "stats", "report"}
        assert {job["state"] for job in jobs} == {"COMPLETED"}
        report = service.store / "runs" / run_id / "tasks" / "report" / "logs" / "report-0.log"
        assert report.read_text().rstrip().endswith("[simrun] exit 0")

        # A run with packages: built as the login by a job, imported by the command.
        with service.client(token) as alice:
            run_id = submit(alice, PACKAGES)
            run = wait_until_ended(alice, run_id, timeout_s=300, interval_s=1)
            assert run["state"] == "succeeded", run
        ledger = service.store / "slurm" / "runs" / f"{workflow_name(run_id)}.json"
        kept = json.loads(ledger.read_text())
        assert [job["node"] for job in kept["jobs"]] == [BUILD_NODE, "use"]
        venv = Path(kept["environment"])
        assert venv.stat().st_uid == pwd.getpwnam(TEAM_LOGIN).pw_uid
        log = service.store / "runs" / run_id / "tasks" / "use" / "logs" / "use-0.log"
        assert "answer 42" in log.read_text()
