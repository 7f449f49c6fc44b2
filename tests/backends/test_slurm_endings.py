"""How a run's jobs end badly on the real Slurm cluster, through the service: a job past its
time limit (TIMEOUT) and one an administrator cancelled (CANCELLED) fail their run with
Slurm's words and no retry; a failed upstream leaves its dependents unsubmitted and nothing
pending. Then the chunking of a task's extra workers under ``MaxArraySize`` (no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from runs.backends.slurm.commands import Slurm
from runs.backends.slurm.script import Placement, chunks
from runs.backends.slurm.state import Job
from runs.backends.slurm.status import message
from runs.models import Attempt, RunState, Task
from tests.backends.slurm_cluster import (
    PARTITION,
    cluster,
    cluster_state,
    emptied_cluster,
    job_state,
    make_backend,
    run_to_end,
    service_pass,
    slurm_command,
    started_run,
)
from tests.polling import wait_for
from tests.service.controller_support import sent  # noqa: F401

SLEEPER = {"tasks": {"nap": {"command": ["sleep", "600"]}}}
"""A command that outlives any limit of these tests."""


@pytest.fixture
def store(settings, tmp_path: Path) -> Path:
    """The service's home and store of the test's own."""
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    settings.SIMRUN_STORE = tmp_path / "store"
    return settings.SIMRUN_STORE


@pytest.fixture
def slurm(store: Path) -> SlurmBackend:
    return make_backend(store, emptied_cluster(cluster()))


def running_job(slurm: SlurmBackend, run) -> str:
    """Wait until the run's one job runs; its id."""

    def running() -> str:
        service_pass(slurm, run)
        jobs = slurm.ledger.read(workflow_name(run.id)).jobs
        return jobs[0].job_id if jobs and jobs[0].state == "RUNNING" else ""

    return wait_for(
        running,
        timeout_s=60,
        interval_s=0.5,
        what=f"the job of run {run.id} to run",
        details=lambda: cluster_state(slurm.slurm.conf),
    )


@pytest.mark.django_db
@pytest.mark.slow
@pytest.mark.slurm_noacct
@pytest.mark.usefixtures("sent")
def test_a_job_past_its_time_limit_fails_the_run_with_slurms_timeout(store, owner):
    """A one-minute limit (Slurm's smallest) on a task that sleeps ten: Slurm ends the job
    TIMEOUT, and the run fails saying so, with no second attempt. On the cluster without
    accounting, where squeue alone says so, for MinJobAge (and its minute of waiting runs
    beside the other cluster's tests)."""
    conf = emptied_cluster(cluster("--accounting=off"))
    slurm = SlurmBackend(
        store,
        slurm=Slurm(conf=conf),
        where=Placement(partition=PARTITION, time_limit="1"),
        poll_s=0.5,
        grace_s=2.0,
    )
    run = started_run(SLEEPER, owner, slurm)

    done = run_to_end(slurm, run, timeout_s=150)

    assert done.state == RunState.FAILED
    assert "Slurm: TIMEOUT, the job reached its time limit" in done.message
    assert "exited 0" not in done.message  # killed by a signal: Slurm's 0:15 is no exit 0
    [job] = slurm.ledger.read(done.workflow).jobs
    assert job.state == "TIMEOUT"
    [attempt] = Attempt.objects.filter(task__run=run)
    assert attempt.exit_code is None and not attempt.evicted


@pytest.mark.django_db
@pytest.mark.slow
@pytest.mark.usefixtures("sent")
def test_an_administrators_scancel_fails_the_run_and_is_no_eviction(slurm, owner):
    run = started_run(SLEEPER, owner, slurm)
    job = running_job(slurm, run)

    slurm_command(slurm.slurm.conf, "scancel", job)
    done = run_to_end(slurm, run, timeout_s=60)

    assert done.state == RunState.FAILED
    assert "Slurm: CANCELLED by an scancel outside simrun" in done.message
    assert "exited 0" not in done.message
    [ended] = slurm.ledger.read(done.workflow).jobs
    assert ended.state == "CANCELLED"
    [attempt] = Attempt.objects.filter(task__run=run)
    assert attempt.exit_code is None and not attempt.evicted


def test_a_job_simrun_cancelled_is_not_said_cancelled_outside_simrun():
    job = Job(node="nap", job_id="7", attempt=0, memory_gb=0.25, submitted_at=0.0)
    job.state, job.exit_code, job.signal = "CANCELLED", 0, 15
    assert message(job, stopped_at=1.0) == "Slurm: CANCELLED (exit code 0:15) [job 7]"
    assert "by an scancel outside simrun" in message(job, stopped_at=None)


@pytest.mark.django_db
@pytest.mark.slow
@pytest.mark.usefixtures("sent")
def test_a_failed_upstream_leaves_its_dependents_unsubmitted_and_nothing_pending(slurm, owner):
    spec = {
        "tasks": {
            "first": {"command": ["sh", "-c", "exit 3"]},
            "second": {"command": ["echo", "two"], "inputs": {"a": "first"}},
            "third": {"command": ["echo", "three"], "inputs": {"b": "second"}},
        }
    }
    run = started_run(spec, owner, slurm)

    done = run_to_end(slurm, run, timeout_s=60)

    assert done.state == RunState.FAILED
    assert done.message.startswith("task first failed: ")
    assert "Slurm: FAILED (exit code 3:0)" in done.message
    jobs = slurm.ledger.read(done.workflow).jobs
    assert [j.node for j in jobs] == ["first"]
    states = dict(Task.objects.filter(run=run).values_list("task_id", "state"))
    assert states == {"first": "failed", "second": "skipped", "third": "skipped"}
    mine = slurm_command(
        slurm.slurm.conf, "squeue", "-a", "-h", f"--name={done.workflow}", "-o", "%i %T"
    )
    assert mine == ""
    assert job_state(slurm.slurm.conf, jobs[0].job_id) in {"FAILED", ""}


@pytest.mark.parametrize(
    ("first", "count", "max_array", "arrays"),
    [
        (1, 3, 1001, [(1, 3)]),
        (1, 10, 4, [(1, 3), (4, 3), (7, 3), (10, 1)]),
        (1, 9, 4, [(1, 3), (4, 3), (7, 3)]),
        (5, 2, 2, [(5, 1), (6, 1)]),
        (1, 2, 1, [(1, 1), (2, 1)]),
    ],
)
def test_extra_workers_go_in_arrays_each_under_max_array_size(first, count, max_array, arrays):
    found = chunks(first, count, max_array)
    assert found == arrays
    workers = [w for start, n in found for w in range(start, start + n)]
    assert workers == list(range(first, first + count))
    assert all(n - 1 < max_array for _, n in found)  # its highest index, 0-based
