"""The service's control loop on the Slurm backend: a run from its spec to its results, on
the real clusters of ``.ci/slurm`` (a split task over extra workers, a plugin, a command),
with accounting and without."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.models import RunState
from tests.backends.slurm_cluster import cluster, make_backend, run_to_end, started_run
from tests.service.controller_support import PIPELINE, fresh, sent, states  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(request, settings, tmp_path: Path):
    """The service's backend on the cluster with accounting, or (``"off"``) without."""
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    settings.SIMRUN_STORE = tmp_path / "store"
    options = ("--accounting=off",) if getattr(request, "param", "on") == "off" else ()
    return make_backend(settings.SIMRUN_STORE, cluster(*options))


@pytest.mark.parametrize(
    "slurm",
    ["on", pytest.param("off", marks=pytest.mark.slurm_noacct)],
    indirect=True,
    ids=["accounting", "no-accounting"],
)
def test_a_pipeline_runs_to_its_results_through_the_control_loop(slurm, owner, sent):  # noqa: F811
    run = started_run(PIPELINE, owner, slurm)
    done = run_to_end(slurm, run)
    assert done.state == RunState.SUCCEEDED, done.message
    assert set(states(run).values()) == {"done"}
    phases = slurm.status(done.workflow).tasks
    assert phases["sweep-extra(0:1)"] == phases["sweep-merge"] == "Succeeded"
    assert phases["summary"] == phases["plot"] == "Succeeded"


def test_a_second_kill_for_memory_fails_the_run_naming_the_retry_memory(slurm, owner, sent):  # noqa: F811
    hog = ["python3", "-c", "x = bytearray(2600 << 20)"]
    run = started_run({"tasks": {"hog": {"command": hog, "memory": {"gb": 0.25}}}}, owner, slurm)
    done = run_to_end(slurm, run)
    retry_gb = fresh(run).tasks.get(task_id="hog").plan["retry_memory_gb"]
    assert done.state == RunState.FAILED
    assert f"killed for memory again with the retry memory {retry_gb:g} GiB" in done.message
    jobs = slurm.ledger.read(done.workflow).jobs
    assert [(j.state, j.memory_gb) for j in jobs] == [
        ("OUT_OF_MEMORY", 0.25),
        ("OUT_OF_MEMORY", retry_gb),
    ]
