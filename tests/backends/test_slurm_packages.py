"""``environment.packages`` on the real cluster of ``.ci/slurm``: the venv of a run's packages
is built by a Slurm job of its own, once per content, before the run's task jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from runs.backends.slurm.packages import BUILD_NODE
from runs.backends.slurm.status import backend_status
from tests.backends.packages import pip_index
from tests.backends.slurm_cluster import (
    cluster,
    make_backend,
    slurm_command,
    submit,
    wait_phase,
)

IMPORTS = ["python", "-c", "import pkgdemo; print('answer', pkgdemo.ANSWER)"]


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SlurmBackend:
    pip_index(tmp_path / "index", monkeypatch)
    backend = make_backend(tmp_path / "store", cluster())
    backend.build_memory_gb, backend.packages_timeout_s = 1.5, 90  # the build's own limits
    return backend


def build_jobs(backend: SlurmBackend, run_id: str) -> list[str]:
    """The ids of the jobs that built the run's packages."""
    submission = backend.ledger.read(workflow_name(run_id))
    return [job.job_id for job in submission.jobs if job.node == BUILD_NODE]


def test_a_command_imports_a_package_built_once_by_a_job_for_every_run(backend):
    submit(backend, "pk1", {"use": {"command": IMPORTS}}, packages=("pkgdemo",))
    [building] = build_jobs(backend, "pk1")
    shown = slurm_command(cluster(), "scontrol", "-o", "show", "job", building)
    assert "TimeLimit=00:02:00" in shown and "MinMemoryNode=1.50G" in shown
    waiting = backend_status(backend.ledger.read(workflow_name("pk1"))).waiting
    assert waiting == {"use": f"installing the environment's packages (Slurm job {building})"}
    assert wait_phase(backend, "pk1", {"Succeeded", "Failed"}) == "Succeeded"
    [build] = build_jobs(backend, "pk1")
    submission = backend.ledger.read(workflow_name("pk1"))
    [use] = submission.jobs_of("use")
    assert int(use.job_id) > int(build), "the task's job is submitted after the build's"
    assert "answer 42" in (backend.store / "runs/pk1/tasks/use/logs/use-0.log").read_text()
    assert submission.environment is not None
    assert f"job {build} on" in (submission.environment / f"{BUILD_NODE}-0.log").read_text()

    # The same packages (in another order, twice): the venv is there, no job builds it.
    submit(backend, "pk2", {"use": {"command": IMPORTS}}, packages=("pkgdemo", "pkgdemo"))
    assert build_jobs(backend, "pk2") == []
    assert wait_phase(backend, "pk2", {"Succeeded", "Failed"}) == "Succeeded"
    assert backend.ledger.read(workflow_name("pk2")).environment == submission.environment
    assert "answer 42" in (backend.store / "runs/pk2/tasks/use/logs/use-0.log").read_text()


def test_a_package_pip_cannot_find_fails_the_run_with_pips_words_and_runs_no_task(backend):
    submit(backend, "pk3", {"use": {"command": IMPORTS}}, packages=("nosuchpkg",))
    assert wait_phase(backend, "pk3", {"Succeeded", "Failed"}) == "Failed"
    status = backend.status(workflow_name("pk3"))
    assert "installing the environment's packages (nosuchpkg) failed: Slurm: FAILED" in (
        status.message
    )
    assert "No matching distribution found for nosuchpkg" in status.message
    assert backend.ledger.read(workflow_name("pk3")).jobs_of("use") == []
