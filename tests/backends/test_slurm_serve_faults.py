"""What goes wrong on a real cluster, tried as a new user would, through a team's
``SIMRUN_BACKEND=slurm simrun serve`` on each cluster of ``.ci/slurm`` (with accounting and
without): a requeued and a preempted job are evictions and no finished unit is computed
again; a ``slurmd`` killed mid-run and the serve itself restarted mid-run (without
accounting, until Slurm forgot its job) lose nothing and fail nothing; a ``slurmctld``
stopped for a while neither (on the cluster with accounting: without, the serve's polls are
the same ``squeue``).

Each run is a command sweep whose every computed unit appends its number to a trace; the
units from the fourth on wait while a gate file exists, so each fault surely comes mid-run.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.backends.slurm_cluster import (
    cluster,
    emptied_cluster,
    job_state,
    slurm_command,
    start_cluster,
)
from tests.backends.slurm_serve import (
    CLUSTER_OPTIONS,
    daemon_pid,
    details,
    done_units,
    jobs_of,
    polls_failed,
    team_serve,
)
from tests.backends.test_slurm_evictions import UNITS, preempt, traced_sweep
from tests.e2e.service import Service, run_of, submit, wait_until_ended
from tests.polling import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="the team mode is a root service's"),
]
BOTH = pytest.mark.parametrize(
    "served",
    ["on", pytest.param("off", marks=pytest.mark.slurm_noacct)],
    indirect=True,
    ids=["acct", "noacct"],
)
BACKED_OFF = 4
"""Polls failed in a row before the controller starts again: with a poll a second, the serve
waits 2, 4, 8 and 8 s between them (its longest backoff), about 20 s of a stopped controller."""


@dataclass
class Served:
    """A team's serve on one cluster: the serve, alice's token, the cluster's SLURM_CONF and
    ``.ci/slurm``'s options for it."""

    service: Service
    token: str
    conf: str
    accounting: str

    def client(self) -> httpx.Client:
        return self.service.client(self.token)

    def details(self) -> str:
        return details(self.service, self.conf)

    def start_cluster(self) -> None:
        """Start what of the cluster is stopped, as a site's init system would."""
        start_cluster(*CLUSTER_OPTIONS[self.accounting])


@pytest.fixture(scope="module")
def served(request) -> Iterator[Served]:
    accounting = request.param
    conf = emptied_cluster(cluster(*CLUSTER_OPTIONS[accounting]))
    with team_serve(conf) as (service, token):
        yield Served(service, token, conf, accounting)


@pytest.fixture
def folder() -> Iterator[Path]:
    """The trace and the gate of a run, in a folder of /tmp the team's login writes."""
    where = Path(tempfile.mkdtemp(dir="/tmp"))
    where.chmod(0o777)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def gated_run(served: Served, folder: Path) -> tuple[str, dict[str, Any], set[int]]:
    """A traced sweep submitted by alice, with a unit finished and the next ones held by the
    gate; its id, its one job and the units finished by then."""
    (folder / "gate").touch()
    with served.client() as alice:
        run_id = submit(alice, traced_sweep(folder / "trace", folder / "gate"))
    service = served.service
    wait_for(
        lambda: done_units(service, run_id, "sim", UNITS),
        timeout_s=120,
        interval_s=0.5,
        what=f"a finished unit of run {run_id}",
        details=served.details,
    )
    # Its host, once a poll of the serve saw it run.
    [job] = wait_for(
        lambda: [j for j in jobs_of(service, run_id) if j["host"]],
        timeout_s=60,
        interval_s=0.5,
        what=f"the serve to see where the job of run {run_id} runs",
        details=served.details,
    )
    return run_id, job, done_units(service, run_id, "sim", UNITS)


def finished(served: Served, run_id: str, folder: Path, before: set[int]) -> dict[str, Any]:
    """Wait for the run to end; assert it succeeded with every unit computed once but for
    the ones evicted mid-run, none of ``before`` (finished before the fault) again; the
    attempts of its task."""
    with served.client() as alice:
        run = wait_for(
            lambda: (r := run_of(alice, run_id))["state"] in {"succeeded", "failed"} and r,
            timeout_s=300,
            interval_s=1,
            what=f"run {run_id} to end",
            details=served.details,
        )
    assert run["state"] == "succeeded", run["message"]
    assert 1 <= len(before) <= 3
    computed = Counter(int(line) for line in (folder / "trace").read_text().split())
    assert set(computed) == set(range(UNITS))
    assert {unit: computed[unit] for unit in before} == dict.fromkeys(before, 1)
    [task] = [t for t in run["tasks"] if t["id"] == "sim"]
    assert task["units_done"] == UNITS
    return dict(task)


def evictions(task: dict[str, Any]) -> list[int]:
    """The attempts of a task counted as evictions."""
    return [a["attempt"] for a in task["attempts"] if a["evicted"]]


def once(served: Served, run_id: str, job: dict[str, Any]) -> bool:
    """Whether each node of the run had one job, the node of ``job`` that job."""
    jobs = jobs_of(served.service, run_id)
    mine = [j["job_id"] for j in jobs if j["node"] == job["node"]]
    return mine == [job["job_id"]] and len({j["node"] for j in jobs}) == len(jobs)


def restarts(served: Served, run_id: str) -> int:
    """How often Slurm requeued the run's jobs, as the serve recorded squeue's RestartCnt."""
    return sum(job["restarts"] for job in jobs_of(served.service, run_id))


@pytest.mark.parametrize("evict", ["requeue", "preempt"])
@BOTH
def test_an_evicted_job_is_an_eviction_and_no_finished_unit_is_redone(served, evict, folder):
    run_id, job, before = gated_run(served, folder)
    urgent = ""
    if evict == "requeue":
        slurm_command(served.conf, "scontrol", "requeue", job["job_id"])
    else:
        urgent = preempt(served.conf)
    wait_for(
        lambda: job_state(served.conf, job["job_id"]) == "PENDING",
        what=f"the {evict} of job {job['job_id']}",
        details=served.details,
    )
    (folder / "gate").unlink()
    if urgent:
        slurm_command(served.conf, "scancel", urgent)
    # Slurm holds a requeued job until its credential expires (cred_expire): start it now.
    slurm_command(served.conf, "scontrol", "update", f"JobId={job['job_id']}", "StartTime=now")

    task = finished(served, run_id, folder, before)

    # Each requeue an eviction (a loaded machine may preempt twice, or the merge too).
    assert evictions(task)[:1] == [0]
    assert len(evictions(task)) == restarts(served, run_id) >= 1
    assert [j["state"] for j in jobs_of(served.service, run_id)][-1] == "COMPLETED"


@BOTH
def test_a_slurmd_killed_mid_run_loses_nothing(served, folder):
    """Killed and started again at once (as an init system does): the job goes on, or, if
    Slurm declared its node down meanwhile on a loaded machine, is requeued: an eviction."""
    run_id, job, before = gated_run(served, folder)
    pid = daemon_pid(served.accounting, f"slurmd-{job['host']}")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), what=f"slurmd {job['host']} to die")
    served.start_cluster()
    (folder / "gate").unlink()

    task = finished(served, run_id, folder, before)

    assert len(evictions(task)) == restarts(served, run_id)
    assert all(a["phase"] == "Succeeded" for a in task["attempts"] if not a["evicted"])


# On the cluster without accounting: the one with it runs the longer half of this module.
@pytest.mark.parametrize(
    "served", [pytest.param("off", marks=pytest.mark.slurm_noacct)], indirect=True, ids=["noacct"]
)
def test_a_controller_stopped_for_a_while_loses_nothing_and_fails_nothing(served, folder):
    """``slurmctld`` stopped while the job runs: the serve's polls fail and back off to their
    longest period, the run stays running, and once the controller is back the run succeeds
    with its one job. (The job ends after: one that ends while the controller is down waits
    for its slurmd to tell the controller again, which takes Slurm tens of seconds more.)"""
    run_id, job, before = gated_run(served, folder)
    pid = daemon_pid(served.accounting, "slurmctld")
    os.kill(pid, signal.SIGTERM)
    try:
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), what="slurmctld to stop")
        wait_for(
            lambda: polls_failed(served.service) >= BACKED_OFF,
            timeout_s=120,
            interval_s=0.5,
            what=f"{BACKED_OFF} polls of the serve to fail",
            details=served.details,
        )
        with served.client() as alice:
            run = run_of(alice, run_id)
        assert run["state"] == "running", run
        assert not [t for t in run["tasks"] if t["state"] == "failed"]
    finally:
        served.start_cluster()
    (folder / "gate").unlink()

    task = finished(served, run_id, folder, before)

    assert polls_failed(served.service) == 0
    assert not evictions(task)
    assert once(served, run_id, job)
    assert "Unable to contact slurm controller" in served.service.log.read_text()


@BOTH
def test_a_serve_restarted_mid_run_goes_on_with_its_jobs(served, folder):
    """The serve killed while the job runs; the job ends while it is down (without
    accounting, long enough that Slurm forgets it: MinJobAge); started again, the serve
    finds the job's end (from sacct, or from the job's log in the store) and submits
    nothing twice."""
    run_id, job, before = gated_run(served, folder)
    service = served.service
    service.crash()
    try:
        (folder / "gate").unlink()
        gone = {"on": {"COMPLETED"}, "off": {""}}[served.accounting]
        wait_for(
            lambda: job_state(served.conf, job["job_id"]) in gone,
            timeout_s=180,
            interval_s=1,
            what=f"job {job['job_id']} to end and be {gone}",
            details=served.details,
        )
    finally:
        service.start()

    task = finished(served, run_id, folder, before)

    assert not evictions(task)
    assert once(served, run_id, job)


@pytest.mark.parametrize("served", ["on"], indirect=True, ids=["acct"])
def test_a_reason_that_clears_is_the_tasks_why_waiting_in_the_api(served, folder):
    """Both nodes taken whole by a run's two tasks: the next run's task waits, and the API
    says why in Slurm's words (``Resources``, or ``Priority`` behind another job) until the
    nodes are free; then it runs."""
    (folder / "gate").touch()
    hold = ["sh", "-c", f"while [ -e {folder / 'gate'} ]; do sleep 0.1; done"]
    whole = {"command": hold, "cores": 2}
    with served.client() as alice:
        first = submit(alice, {"tasks": {"a": whole, "b": whole}})
        wait_for(
            lambda: [j["state"] for j in jobs_of(served.service, first)] == ["RUNNING"] * 2,
            timeout_s=120,
            interval_s=0.5,
            what="both nodes taken",
            details=served.details,
        )
        second = submit(alice, {"tasks": {"next": {"command": ["true"], "cores": 2}}})
        why = wait_for(
            lambda: (
                run_of(alice, second)["tasks"][0]["message"].startswith("Slurm: ")
                and run_of(alice, second)["tasks"][0]["message"]
            ),
            timeout_s=60,
            interval_s=0.5,
            what="the task to say why it waits",
            details=served.details,
        )
        assert why in {"Slurm: Resources", "Slurm: Priority"}
        (folder / "gate").unlink()
        ended = [wait_until_ended(alice, run, interval_s=1)["state"] for run in (first, second)]
    assert ended == ["succeeded", "succeeded"]
