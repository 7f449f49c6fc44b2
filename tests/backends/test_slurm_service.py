"""The service's control loop on the Slurm backend: a run from its spec to its results, on
the real cluster of ``.ci/slurm`` (a split task over extra workers, a plugin, a command)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.tasktypes import task_types
from runs.control import reconciling, submitting
from runs.models import Run, RunState
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.backends.slurm_cluster import cluster, make_backend
from tests.polling import wait_for
from tests.service.controller_support import PIPELINE, fresh, sent, states  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(settings, tmp_path: Path):
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    settings.SIMRUN_STORE = tmp_path / "store"
    return make_backend(settings.SIMRUN_STORE, cluster())


def test_a_pipeline_runs_to_its_results_through_the_control_loop(slurm, owner, sent):  # noqa: F811
    spec = parse_spec(yaml.safe_dump(PIPELINE, sort_keys=False), types=task_types())
    run = create_run(spec=spec, owner=owner)
    assert submitting.submit(run.id, backend=slurm)

    def ended() -> Run | None:
        slurm.poll(force=True)
        reconciling.reconcile_pass(backend=slurm)
        current = fresh(run)
        return current if current.state in {RunState.SUCCEEDED, RunState.FAILED} else None

    done = wait_for(
        ended,
        timeout_s=300,
        interval_s=1,
        what="the run to end",
        details=lambda: f"{fresh(run).message} {states(run)}",
    )
    assert done.state == RunState.SUCCEEDED, done.message
    assert set(states(run).values()) == {"done"}
    phases = slurm.status(done.workflow).tasks
    assert phases["sweep-extra(0:1)"] == phases["sweep-merge"] == "Succeeded"
    assert phases["summary"] == phases["plot"] == "Succeeded"


def test_a_second_kill_for_memory_fails_the_run_naming_the_retry_memory(slurm, owner, sent):  # noqa: F811
    hog = ["python3", "-c", "x = bytearray(2600 << 20)"]
    spec_text = {"tasks": {"hog": {"command": hog, "memory": {"gb": 0.25}}}}
    spec = parse_spec(yaml.safe_dump(spec_text, sort_keys=False), types=task_types())
    run = create_run(spec=spec, owner=owner)
    assert submitting.submit(run.id, backend=slurm)

    def ended() -> Run | None:
        slurm.poll(force=True)
        reconciling.reconcile_pass(backend=slurm)
        current = fresh(run)
        return current if current.state in {RunState.SUCCEEDED, RunState.FAILED} else None

    done = wait_for(ended, timeout_s=300, interval_s=1, what="the run to end")
    retry_gb = fresh(run).tasks.get(task_id="hog").plan["retry_memory_gb"]
    assert done.state == RunState.FAILED
    assert f"killed for memory again with the retry memory {retry_gb:g} GiB" in done.message
    jobs = slurm.ledger.read(done.workflow).jobs
    assert [(j.state, j.memory_gb) for j in jobs] == [
        ("OUT_OF_MEMORY", 0.25),
        ("OUT_OF_MEMORY", retry_gb),
    ]
