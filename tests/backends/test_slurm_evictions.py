"""Evictions on the real Slurm cluster, through the service's control loop: a ``slurmd``
killed mid-run and started only after Slurm declared its node down; its job is requeued (an
eviction) and no unit the ledger had finished is computed again. (A requeue, a preemption
and a ``slurmd`` started again at once, through ``simrun serve`` on both clusters:
``test_slurm_serve_faults.py``, which uses the sweep and the preemption of this module.)"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.ledger import Ledger
from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from runs.common import store
from runs.models import Attempt, RunState
from tests.backends.slurm_cluster import (
    cluster,
    cluster_state,
    emptied_cluster,
    make_backend,
    run_to_end,
    service_pass,
    slurm_command,
    start_cluster,
    started_run,
)
from tests.polling import wait_for
from tests.service.controller_support import sent  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.usefixtures("sent")]
UNITS = 24
STATE = Path("/var/lib/simrun-slurm/simrun/run")


@pytest.fixture
def slurm(settings, tmp_path: Path) -> SlurmBackend:
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    settings.SIMRUN_STORE = tmp_path / "store"
    return make_backend(settings.SIMRUN_STORE, emptied_cluster(cluster()))


def traced_sweep(trace: Path, gate: Path) -> dict[str, Any]:
    """A command sweep whose every computed unit appends its number to ``trace``; the units
    from the fourth on wait while ``gate`` exists, so the test evicts a job that is surely
    mid-run."""
    unit = (
        f"[ {{U}} -lt 3 ] || while [ -e {gate} ]; do sleep 0.1; done; echo {{U}} >> {trace}; "
        'echo "{{\\"v\\": $(({U}*{U}))}}" > {out}/r.json'
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


def running_sweep(slurm: SlurmBackend, owner: Any, folder: Path) -> tuple[Any, str]:
    """A traced sweep (``folder``: its trace and gate) started, with a unit finished and
    the next ones held by the gate; the run and its job's id."""
    (folder / "gate").touch()
    run = started_run(traced_sweep(folder / "trace", folder / "gate"), owner, slurm)
    wait_for(
        lambda: (service_pass(slurm, run), done_units(run.id))[1],
        timeout_s=120,
        what="a finished unit",
        details=lambda: cluster_state(slurm.slurm.conf),
    )
    [job] = slurm.ledger.read(workflow_name(run.id)).jobs
    return run, job.job_id


def preempt(conf: str) -> str:
    """A job of the partition ``urgent`` taking both nodes whole: Slurm preempts (requeues)
    the partition ``simrun``'s running jobs for it. Its id."""
    argv = ["sbatch", "--parsable", "-p", "urgent", "-N", "2", "--exclusive", "-o", "/dev/null"]
    return slurm_command(conf, *argv, "--wrap", "sleep 300").strip()


def restarts(conf: str, job: str) -> int:
    """How often Slurm requeued a job (squeue's RestartCnt)."""
    out = slurm_command(conf, "squeue", "-h", "-t", "all", "-j", job, "-O", "RestartCnt")
    return int(out.strip() or 0)


def requeues(slurm: SlurmBackend, run_id: str) -> int:
    """How often Slurm requeued the jobs of a run, together."""
    jobs = slurm.ledger.read(workflow_name(run_id)).jobs
    return sum(restarts(slurm.slurm.conf, job.job_id) for job in jobs)


def test_a_slurmd_killed_until_its_node_failed_loses_no_finished_unit(slurm, owner, tmp_path):
    """Started again only after its node was declared down, the job was requeued: one
    eviction, with no finished unit computed again."""
    run, job = running_sweep(slurm, owner, tmp_path)
    [host] = {j.host for j in slurm.ledger.read(workflow_name(run.id)).jobs}
    pid = int((STATE / f"slurmd-{host}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    try:
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), what=f"slurmd {host} to die")
        finished = done_units(run.id)
        # Declared down at once, as Slurm does SlurmdTimeout later (30 s here) and an
        # administrator does on seeing it: the node's jobs are requeued either way.
        down = [f"NodeName={host}", "State=DOWN", "Reason=slurmd killed by a test"]
        slurm_command(slurm.slurm.conf, "scontrol", "update", *down)
        wait_for(
            lambda: (service_pass(slurm, run), restarts(slurm.slurm.conf, job))[1] == 1,
            timeout_s=180,
            interval_s=1,
            what="Slurm to requeue the job of the failed node",
        )
        assert service_pass(slurm, run).state == RunState.RUNNING
    finally:
        start_cluster()  # starts the slurmd again, as a site's init system would
    # The requeued job of the failed node starts when its credential expired (.ci/slurm's
    # cred_expire): the restarted slurmd revokes the step it ran before, and a job started
    # earlier is killed with "Job credential revoked".
    (tmp_path / "gate").unlink()

    done = run_to_end(slurm, run)

    assert done.state == RunState.SUCCEEDED, done.message
    computed = Counter(int(line) for line in (tmp_path / "trace").read_text().split())
    assert set(computed) == set(range(UNITS))
    assert {unit: computed[unit] for unit in finished} == dict.fromkeys(finished, 1)
    evicted = Attempt.objects.filter(task__run=run, evicted=True)
    assert evicted.count() == requeues(slurm, run.id) == 1
    assert not Attempt.objects.filter(task__run=run, evicted=False).exclude(phase="Succeeded")
