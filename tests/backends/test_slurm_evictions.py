"""Evictions on the real Slurm cluster, through the service: a requeued and a preempted job
count as evictions, and no unit the ledger had finished is computed again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.ledger import Ledger
from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from runs.common import store
from runs.models import Attempt, RunState, Task
from tests.backends.slurm_cluster import (
    cluster,
    job_state,
    make_backend,
    run_to_end,
    service_pass,
    slurm_command,
    started_run,
)
from tests.polling import wait_for
from tests.service.controller_support import sent  # noqa: F401

pytestmark = pytest.mark.django_db
UNITS = 24


@pytest.fixture
def slurm(settings, tmp_path: Path) -> SlurmBackend:
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    settings.SIMRUN_STORE = tmp_path / "store"
    return make_backend(settings.SIMRUN_STORE, cluster())


def traced_sweep(trace: Path) -> dict[str, Any]:
    """A command sweep whose every computed unit appends its number to ``trace``."""
    unit = (
        "sleep 0.5; echo {U} >> " + str(trace) + '; echo "{{\\"v\\": $(({U}*{U}))}}" > {out}/r.json'
    )
    sweep = {"U": {"range": [0, UNITS]}}
    return {
        "tasks": {
            "sim": {"command": ["sh", "-c", unit], "sweep": sweep, "results": "r.json", "cores": 1}
        }
    }


def done_units(run_id: str) -> set[int]:
    """The units the task's ledger records as finished."""
    try:
        ledger = Ledger.read(store.task_dir(run_id, "sim") / "units")
    except FileNotFoundError:
        return set()
    ledger.refresh()
    return set(ledger.covered([range(UNITS)]))


def preempt(conf: str) -> str:
    """A job of the partition ``urgent`` taking both nodes whole: Slurm preempts (requeues)
    the partition ``simrun``'s running jobs for it. Its id."""
    argv = ["sbatch", "--parsable", "-p", "urgent", "-N", "2", "--exclusive", "-o", "/dev/null"]
    return slurm_command(conf, *argv, "--wrap", "sleep 300").strip()


@pytest.mark.parametrize("evict", ["requeue", "preempt"])
def test_an_evicted_sweep_goes_on_without_redoing_a_finished_unit(
    evict,
    slurm,
    owner,
    sent,
    tmp_path,  # noqa: F811
):
    trace = tmp_path / "trace"
    run = started_run(traced_sweep(trace), owner, slurm)
    wait_for(lambda: (service_pass(slurm, run), len(done_units(run.id)) >= 3)[1], timeout_s=120)
    [job] = slurm.ledger.read(workflow_name(run.id)).jobs
    urgent = ""
    if evict == "requeue":
        slurm_command(slurm.slurm.conf, "scontrol", "requeue", job.job_id)
    else:
        urgent = preempt(slurm.slurm.conf)
    wait_for(lambda: job_state(slurm.slurm.conf, job.job_id) == "PENDING", what="the eviction")
    finished = done_units(run.id)
    assert 3 <= len(finished) < UNITS
    if urgent:
        slurm_command(slurm.slurm.conf, "scancel", urgent)
    # Slurm holds a requeued job about 2 minutes: let it start now.
    slurm_command(slurm.slurm.conf, "scontrol", "update", f"JobId={job.job_id}", "StartTime=now")

    done = run_to_end(slurm, run)

    assert done.state == RunState.SUCCEEDED, done.message
    computed = Counter(int(line) for line in trace.read_text().split())
    assert set(computed) == set(range(UNITS))
    assert {unit: computed[unit] for unit in finished} == dict.fromkeys(finished, 1)
    task = Task.objects.get(run=run, task_id="sim")
    assert task.units_done == UNITS
    [evicted] = Attempt.objects.filter(task=task, evicted=True)
    assert evicted.attempt == 0
