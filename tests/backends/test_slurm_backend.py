"""The Slurm backend against the real two-node cluster of ``.ci/slurm``: jobs, DAGs, logs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from runs.backends.slurm.script import Placement
from runs.common.store import TaskFolder
from tests.backends.slurm_cluster import (
    cluster,
    job_state,
    make_backend,
    plan,
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


def test_the_backend_reads_the_largest_node_from_sinfo(backend):
    assert {n.name for n in backend.nodes()} == {"n1", "n2"}
    assert backend.max_cores == 2
    assert backend.max_memory_gb == pytest.approx(8000 / 1024)


def test_a_command_task_succeeds_with_its_log_in_the_store(backend):
    submit(backend, "c1", {"hello": {"command": shell("echo hello from $SIMRUN_NODE")}})
    assert wait_phase(backend, "c1", {"Succeeded", "Failed"}) == "Succeeded"
    status = backend.status(workflow_name("c1"))
    assert status.tasks == {"hello": "Succeeded"}
    assert status.hosts["hello"] in {"n1", "n2"}
    log = backend.store / "runs/c1/tasks/hello/logs/hello-0.log"
    assert f"hello from {status.hosts['hello']}" in log.read_text()
    folder = TaskFolder(backend.store, ("runs", "c1", "tasks", "hello"))
    assert backend.keep_logs(workflow_name("c1"), "hello", folder).complete
    [pod] = backend.logs(workflow_name("c1"), "hello")
    assert pod.done and "hello from" in pod.text


def test_a_dag_runs_a_node_once_its_input_succeeded(backend):
    tasks = {
        "make": {"command": shell('echo 41 > "$SIMRUN_OUT/n"')},
        "use": {
            "command": shell('echo $(( $(cat inputs/data/n) + 1 )) > "$SIMRUN_OUT/n"'),
            "inputs": {"data": "make"},
        },
    }
    submit(backend, "d1", tasks)
    assert wait_phase(backend, "d1", {"Succeeded", "Failed"}) == "Succeeded"
    assert (backend.store / "runs/d1/tasks/use/out/n").read_text().strip() == "42"


def test_a_split_task_spreads_its_extra_workers_over_both_nodes_and_merges(backend):
    tasks = {"sq": {"kind": "split", "type": "squares", "settings": {"n": 40}}}
    plans = {"sq": plan(cores=2, workers=3, coordinator_merges=False)}
    submit(backend, "s1", tasks, plans)
    assert wait_phase(backend, "s1", {"Succeeded", "Failed"}, timeout_s=180) == "Succeeded"
    status = backend.status(workflow_name("s1"))
    assert set(status.tasks) == {"sq-w0", "sq-extra(0:1)", "sq-extra(1:2)", "sq-merge"}
    assert status.tasks["sq-merge"] == "Succeeded"
    assert {status.hosts[n] for n in status.tasks} == {"n1", "n2"}
    out = backend.store / "runs/s1/tasks/sq/out"
    assert json.loads((out / "squares.json").read_text()) == [i * i for i in range(40)]


def test_a_failing_command_fails_with_slurms_words(backend):
    submit(backend, "f1", {"bad": {"command": shell("exit 3")}})
    assert wait_phase(backend, "f1", {"Succeeded", "Failed"}) == "Failed"
    [attempt] = backend.status(workflow_name("f1")).failed["bad"]
    assert attempt.exit_code == 3
    assert "Slurm: FAILED" in attempt.message
    assert not attempt.oom_killed and not attempt.evicted


def test_a_cancel_ends_every_job_of_the_run(backend):
    submit(backend, "x1", {"slow": {"command": shell("sleep 300")}})
    wait_phase(backend, "x1", {"Running"}, node="slow")
    backend.cancel(workflow_name("x1"))
    assert wait_phase(backend, "x1", {"Failed"}, node="slow") == "Failed"
    status = backend.status(workflow_name("x1"))
    assert status.message == "Stopped with strategy 'Terminate'"
    assert status.failed["slow"][0].message.startswith("Slurm: CANCELLED")
    assert not backend.placements()


def test_a_job_slurm_refuses_fails_the_submission_with_slurms_words(backend):
    with pytest.raises(ValueError, match="sbatch refused the job"):
        submit(backend, "big1", {"huge": {"command": shell("true")}}, {"huge": plan(memory_gb=100)})
    assert backend.ledger.read(workflow_name("big1")).ended


def test_a_job_waiting_for_a_reason_that_never_clears_fails_naming_it(tmp_path, slurm_conf):
    failed = slurm_command(
        slurm_conf, "sbatch", "--parsable", "-p", "simrun", "-o", "/dev/null", "--wrap", "exit 1"
    ).strip()
    wait_for(lambda: job_state(slurm_conf, failed) == "FAILED", what="the upstream job to fail")
    backend = make_backend(tmp_path / "store", slurm_conf)
    backend.where = backend.submitter.where = Placement(
        partition="simrun", extra=(f"--dependency=afterok:{failed}",)
    )
    backend.pending_timeout_s = 3
    submit(backend, "w1", {"stuck": {"command": shell("true")}})
    waiting = wait_for(
        lambda: (backend.poll(force=True), backend.status(workflow_name("w1")).waiting)[1],
        what="the job to wait",
    )
    assert wait_phase(backend, "w1", {"Failed"}, node="stuck") == "Failed"
    [attempt] = backend.status(workflow_name("w1")).failed["stuck"]
    assert "DependencyNeverSatisfied" in attempt.message
    assert "clears only when an administrator acts" in attempt.message
    assert waiting in ({"stuck": "Slurm: Dependency"}, {"stuck": "Slurm: DependencyNeverSatisfied"})


def waits_for(backend: SlurmBackend, name: str) -> str:
    """Why the run's task waits, after a poll now."""
    backend.poll(force=True)
    return backend.status(name).waiting.get("stuck", "")


@pytest.mark.parametrize("cause", ["held", "drained"])
def test_a_job_an_administrator_must_release_fails_after_the_timeout_naming_why(
    cause, backend, slurm_conf
):
    """Held by an administrator (``JobHeldAdmin``), or asking for a drained node (Slurm adds
    the nodes: ``ReqNodeNotAvail, UnavailableNodes:n1``): neither clears by itself."""
    backend.pending_timeout_s = 3
    # Held: it waits a minute first, so the hold comes before it could run.
    extra = ("-w", "n1") if cause == "drained" else ("--begin=now+60",)
    backend.where = backend.submitter.where = Placement(partition="simrun", extra=extra)
    if cause == "drained":
        slurm_command(slurm_conf, "scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=t")
    try:
        submit(backend, f"h{cause}", {"stuck": {"command": shell("true")}})
        if cause == "held":
            # Waiting longer than the timeout for a reason that clears (its begin time) does
            # not count: the timeout starts with the hold.
            name = workflow_name(f"h{cause}")
            [job] = backend.ledger.read(name).jobs
            wait_for(
                lambda: (
                    waits_for(backend, name) == "Slurm: BeginTime"
                    and time.time() - job.submitted_at > backend.pending_timeout_s
                ),
                what="the job to wait past the timeout for its begin time",
            )
            slurm_command(slurm_conf, "scontrol", "hold", job.job_id)
            wait_for(lambda: waits_for(backend, name) == "Slurm: JobHeldAdmin", what="the hold")
            assert backend.status(name).tasks == {"stuck": "Pending"}
        assert wait_phase(backend, f"h{cause}", {"Failed"}, node="stuck") == "Failed"
    finally:
        if cause == "drained":
            slurm_command(slurm_conf, "scontrol", "update", "NodeName=n1", "State=RESUME")
    [attempt] = backend.status(workflow_name(f"h{cause}")).failed["stuck"]
    reason = "JobHeldAdmin" if cause == "held" else "ReqNodeNotAvail, UnavailableNodes:n1"
    assert f"reason {reason}, which clears only when an administrator acts" in attempt.message


def test_a_job_past_its_partitions_time_limit_fails_after_the_timeout_naming_it(
    tmp_path, slurm_conf
):
    """A partition whose MaxTime is shorter than the job's time limit: Slurm accepts the job
    (EnforcePartLimits=NO, its default) and leaves it pending with reason
    PartitionTimeLimit until an administrator acts."""
    backend = make_backend(tmp_path / "store", slurm_conf)
    backend.pending_timeout_s = 3
    short = "simrun-short"
    backend.where = backend.submitter.where = Placement(partition=short, time_limit="10")
    slurm_command(slurm_conf, "scontrol", "create", f"PartitionName={short}", "Nodes=ALL",
                  "MaxTime=1", "State=UP")  # fmt: skip
    try:
        submit(backend, "t1", {"stuck": {"command": shell("true")}})
        assert wait_phase(backend, "t1", {"Failed"}, node="stuck") == "Failed"
    finally:
        slurm_command(slurm_conf, "scontrol", "delete", f"PartitionName={short}")
    [attempt] = backend.status(workflow_name("t1")).failed["stuck"]
    assert "reason PartitionTimeLimit, which clears only when an administrator acts" in (
        attempt.message
    )
