"""What Slurm does to jobs from outside, on the real cluster: a requeue is an eviction whose
next attempt has a log of its own; a restarted service adopts a job its record lacks. (A
stopped controller and jobs Slurm forgot without accounting: ``test_slurm_commands.py`` and,
through ``simrun serve``, ``test_slurm_serve_faults.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from tests.backends.slurm_cluster import (
    cluster,
    job_state,
    make_backend,
    shell,
    slurm_command,
    submit,
    wait_phase,
)
from tests.polling import wait_for


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
