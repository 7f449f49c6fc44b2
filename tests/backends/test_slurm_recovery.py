"""What Slurm does to jobs from outside, on the real cluster: a requeue is an eviction, a
stopped controller loses and fails nothing, a job forgotten without accounting is retried."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from runs.backends.base import BackendUnavailable, workflow_name
from runs.backends.slurm.backend import SlurmBackend
from tests.backends.slurm_cluster import (
    cluster,
    job_state,
    make_backend,
    shell,
    slurm_command,
    start_cluster,
    submit,
    wait_phase,
)
from tests.polling import wait_for

CONTROLLER_PID = Path("/var/lib/simrun-slurm/simrun/run/slurmctld.pid")


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    return cluster()


@pytest.fixture
def backend(tmp_path: Path, slurm_conf: str) -> SlurmBackend:
    return make_backend(tmp_path / "store", slurm_conf)


def only_job(backend: SlurmBackend, run_id: str) -> str:
    [job] = backend.ledger.read(workflow_name(run_id)).jobs
    return job.job_id


def test_a_requeued_job_is_an_eviction_and_runs_again_as_the_next_attempt(backend, slurm_conf):
    submit(backend, "r1", {"work": {"command": shell('echo "attempt $SIMRUN_ATTEMPT"; sleep 4')}})
    wait_phase(backend, "r1", {"Running"}, node="work")
    job = only_job(backend, "r1")
    first = backend.store / "runs/r1/tasks/work/logs/work-0.log"
    wait_for(lambda: first.exists() and "attempt 0" in first.read_text(), what="attempt 0")
    slurm_command(slurm_conf, "scontrol", "requeue", job)
    wait_for(lambda: job_state(slurm_conf, job) == "PENDING", what="the requeued job to wait")
    # Slurm holds a requeued job about 2 minutes: let it start now.
    slurm_command(slurm_conf, "scontrol", "update", f"JobId={job}", "StartTime=now")
    assert wait_phase(backend, "r1", {"Succeeded", "Failed"}, timeout_s=120) == "Succeeded"
    [evicted] = backend.status(workflow_name("r1")).failed["work"]
    assert evicted.attempt == 0 and evicted.evicted and not evicted.oom_killed
    logs = backend.store / "runs/r1/tasks/work/logs"
    assert "attempt 0" in (logs / "work-0.log").read_text()
    assert "attempt 1" in (logs / "work-1.log").read_text()
    assert [p.attempt for p in backend.logs(workflow_name("r1"), "work")] == [0, 1]


def test_a_stopped_controller_loses_nothing_and_fails_nothing(backend, slurm_conf):
    submit(backend, "k1", {"work": {"command": shell("sleep 6")}})
    wait_phase(backend, "k1", {"Running"}, node="work")
    pid = int(CONTROLLER_PID.read_text())
    os.kill(pid, signal.SIGTERM)
    try:
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), what="slurmctld to stop")
        with pytest.raises(BackendUnavailable):
            backend.poll(force=True)
        # The status is the ledger's meanwhile: nothing failed.
        assert backend.status(workflow_name("k1")).tasks == {"work": "Running"}
    finally:
        start_cluster()
    assert wait_phase(backend, "k1", {"Succeeded", "Failed"}) == "Succeeded"


def test_without_accounting_a_job_slurm_forgot_is_resolved_from_its_log(tmp_path):
    conf = cluster("--accounting=off")  # MinJobAge=30 there
    backend = make_backend(tmp_path / "store", conf, poll_s=3600)
    tasks = {"ok": {"command": shell("true")}, "bad": {"command": shell("exit 3")}}
    submit(backend, "a1", tasks)
    jobs = {j.node: j.job_id for j in backend.ledger.read(workflow_name("a1")).jobs}
    # The service polls no more until Slurm forgot both jobs (as if it was down meanwhile).
    wait_for(
        lambda: not any(job_state(conf, job) for job in jobs.values()),
        timeout_s=180,
        interval_s=1,
        what="Slurm to forget the jobs",
    )
    backend.poll(force=True)
    status = backend.status(workflow_name("a1"))
    assert status.tasks == {"ok": "Succeeded", "bad": "Failed"}
    [failed] = status.failed["bad"]
    assert failed.exit_code == 3 and not failed.evicted
    assert len(backend.ledger.read(workflow_name("a1")).jobs) == 2


def test_a_restarted_service_finds_its_jobs_by_name_and_goes_on(backend, slurm_conf):
    submit(backend, "s1", {"work": {"command": shell("sleep 3")}})
    wait_phase(backend, "s1", {"Running"}, node="work")
    [job] = backend.ledger.read(workflow_name("s1")).jobs
    # The service stopped between sbatch and its record: the ledger lacks the job.
    with backend.ledger.lock():
        submission = backend.ledger.read(workflow_name("s1"))
        submission.jobs = []
        backend.ledger.write(submission)
    restarted = make_backend(backend.store, slurm_conf)
    assert wait_phase(restarted, "s1", {"Succeeded", "Failed"}) == "Succeeded"
    [adopted] = restarted.ledger.read(workflow_name("s1")).jobs
    assert (adopted.job_id, adopted.node, adopted.attempt) == (job.job_id, "work", 0)
