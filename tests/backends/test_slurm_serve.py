"""A new user's tries through a real ``SIMRUN_BACKEND=slurm simrun serve`` on the cluster of
``.ci/slurm``: the service as root for a team, the user mapped to a Unix login, every task a
Slurm job of that login. The README's demo (a DAG of three tasks) and a run whose packages a
job of that login builds; a command sweep spread over both nodes with extra workers and a
merge; a kill for memory retried once, a second kill failing the run; a cancel."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from runs.backends.slurm.packages import BUILD_NODE
from tests.backends.packages import write_wheel
from tests.backends.slurm_cluster import (
    TEAM_LOGIN,
    cluster,
    cluster_state,
    emptied_cluster,
    job_state,
)
from tests.backends.slurm_serve import jobs_of, ledger_of, team_serve
from tests.e2e.service import (
    Service,
    run_of,
    submit,
    wait_until_ended,
    wait_until_state,
)
from tests.polling import wait_for

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


@pytest.fixture(scope="module")
def index() -> Iterator[Path]:
    """pip's only index, with ``pkgdemo``, in a folder of /tmp the login may read."""
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    folder.chmod(0o755)
    write_wheel(folder, "pkgdemo", {"pkgdemo/__init__.py": "ANSWER = 42\n"})
    yield folder
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def team(index: Path) -> Iterator[tuple[Service, str]]:
    """The team's serve on the cluster and the token of alice, mapped to the team's login."""
    conf = emptied_cluster(cluster())
    with team_serve(conf, PIP_FIND_LINKS=str(index), PIP_NO_INDEX="1") as served:
        yield served


def test_the_readmes_demo_and_a_run_with_packages_succeed_through_simrun_serve_on_slurm(team):
    service, token = team
    assert "backend slurm (team mode" in service.log.read_text()
    with service.client(token) as alice:
        run_id = submit(alice, yaml.safe_load(DEMO.read_text()))
        run = wait_until_ended(alice, run_id, timeout_s=300, interval_s=1)
        assert run["state"] == "succeeded", run
        table = alice.get(f"runs/{run_id}/tasks/sweep/results/")
        assert table.status_code == 200, table.text
        assert table.json()["count"] == 24
    jobs = jobs_of(service, run_id)
    assert {job["node"] for job in jobs} >= {"sweep-w0", "stats", "report"}
    assert {job["state"] for job in jobs} == {"COMPLETED"}
    report = service.store / "runs" / run_id / "tasks" / "report" / "logs" / "report-0.log"
    assert report.read_text().rstrip().endswith("[simrun] exit 0")

    # A run with packages: built as the login by a job, imported by the command.
    with service.client(token) as alice:
        run_id = submit(alice, PACKAGES)
        run = wait_until_ended(alice, run_id, timeout_s=300, interval_s=1)
        assert run["state"] == "succeeded", run
    kept = ledger_of(service, run_id)
    assert [job["node"] for job in kept["jobs"]] == [BUILD_NODE, "use"]
    venv = Path(kept["environment"])
    assert venv.stat().st_uid == pwd.getpwnam(TEAM_LOGIN).pw_uid
    log = service.store / "runs" / run_id / "tasks" / "use" / "logs" / "use-0.log"
    assert "answer 42" in log.read_text()


def test_a_command_sweep_spreads_over_both_nodes_and_merges_its_table(team):
    """Two workers of a whole node each run at once, one on each node; the merge makes one
    table of every unit."""
    service, token = team
    unit = 'sleep 0.2; echo "{{\\"square\\": $(({U}*{U}))}}" > {out}/r.json'
    sweep = {"command": ["sh", "-c", unit], "sweep": {"U": {"range": [0, 40]}}}
    spec = {"tasks": {"sim": {**sweep, "results": "r.json", "workers": 2, "cores": 2}}}
    with service.client(token) as alice:
        run_id = submit(alice, spec)
        run = wait_until_ended(alice, run_id, timeout_s=300, interval_s=1)
        assert run["state"] == "succeeded", run
        table = alice.get(f"runs/{run_id}/tasks/sim/results/", params={"page_size": 100}).json()
    assert table["count"] == 40
    squares = sorted(int(row["square"]) for row in table["results"])
    assert squares == [u * u for u in range(40)]
    jobs = jobs_of(service, run_id)
    workers = [job for job in jobs if job["node"] != "sim-merge"]
    assert {job["host"] for job in workers} == {"n1", "n2"}, workers
    assert "sim-merge" in {job["node"] for job in jobs}


def test_a_kill_for_memory_is_retried_once_and_a_second_fails_the_run_naming_it(team):
    service, token = team
    holds = "import sys; x = bytearray(int(sys.argv[1]) << 20); print(len(x))"
    task = {"command": ["python3", "-c", holds], "memory": {"gb": 0.25}}
    runs = {
        mib: {"tasks": {"big": {**task, "command": [*task["command"], str(mib)]}}}
        for mib in (300, 2600)
    }
    with service.client(token) as alice:
        ids = {mib: submit(alice, spec) for mib, spec in runs.items()}
        once, twice = (wait_until_ended(alice, ids[m], timeout_s=300, interval_s=1) for m in runs)
    assert once["state"] == "succeeded", once
    assert [job["state"] for job in jobs_of(service, ids[300])] == ["OUT_OF_MEMORY", "COMPLETED"]
    assert twice["state"] == "failed"
    retry_gb = jobs_of(service, ids[2600])[1]["memory_gb"]
    assert f"killed for memory again with the retry memory {retry_gb:g} GiB" in twice["message"]


def test_a_cancel_ends_the_runs_job(team):
    service, token = team
    spec = {"tasks": {"wait": {"command": ["sleep", "300"]}}}
    with service.client(token) as alice:
        run_id = submit(alice, spec)
        wait_until_state(alice, run_id, "running")
        wait_for(
            lambda: [j["state"] for j in jobs_of(service, run_id)] == ["RUNNING"],
            timeout_s=120,
            interval_s=0.5,
            what="the job to run",
        )
        assert alice.post(f"runs/{run_id}/cancel/").status_code == 202
        run = wait_until_ended(alice, run_id, timeout_s=120, interval_s=1)
        assert run["state"] == "cancelled", run
    [job] = jobs_of(service, run_id)
    conf = cluster()
    wait_for(
        lambda: job_state(conf, job["job_id"]) in {"CANCELLED", ""},
        timeout_s=120,
        interval_s=0.5,
        what=f"Slurm to cancel job {job['job_id']}",
        details=lambda: cluster_state(conf),
    )


def test_the_harness_measures_the_peak_memory_of_the_jobs_own_cgroup(team):
    """A split task whose one unit touches 160 MiB in a pool process of the harness, not in
    the harness itself: the job's cgroup holds both (``SIMRUN_MEMORY_SOURCE=cgroup``), so
    the attempt's peak is 160 MiB or more, and under the job's 0.5 GiB."""
    service, token = team
    task = {"type": "alloc", "settings": {"units": 1, "mb": 160}, "memory": {"gb": 0.5}}
    with service.client(token) as alice:
        run_id = submit(alice, {"tasks": {"hold": task}})
        run = wait_until_ended(alice, run_id, timeout_s=120, interval_s=1)
        assert run["state"] == "succeeded", run
        [task] = run_of(alice, run_id)["tasks"]
    [attempt] = [a for a in task["attempts"] if a["worker"] == "hold-w0"]
    assert 160 << 20 <= (attempt["peak_bytes"] or 0) < 512 << 20, task["attempts"]
    assert {job["state"] for job in jobs_of(service, run_id)} == {"COMPLETED"}
