"""The load on Slurm's controller: one squeue per poll period for every live run together."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from tests.backends.slurm_cluster import cluster, make_backend, shell, submit


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    return cluster()


@pytest.fixture
def backend(tmp_path: Path, slurm_conf: str) -> SlurmBackend:
    return make_backend(tmp_path / "store", slurm_conf, poll_s=3600)


def test_one_squeue_a_poll_serves_every_run(backend):
    names = [
        workflow_name(run)
        for run in ("p1", "p2", "p3")
        if submit(backend, run, {"wait": {"command": shell("sleep 300")}})
    ]
    try:
        backend.slurm.calls.clear()
        for _ in range(5):
            versions = backend.versions(names)
            for name in names:
                backend.status(name)
            backend.placements()
        assert backend.slurm.calls == {"squeue": 1}
        assert set(versions) == set(names)
        assert len({p.workflow for p in backend.placements()}) == 3
        backend.poll(force=True)
        assert backend.slurm.calls == {"squeue": 2}
    finally:
        for name in names:
            backend.cancel(name)


def test_a_second_backend_process_shares_the_poll(backend, slurm_conf):
    submit(backend, "q1", {"wait": {"command": shell("sleep 300")}})
    try:
        backend.status(workflow_name("q1"))
        other = make_backend(backend.store, slurm_conf, poll_s=3600)
        other.slurm.calls.clear()
        other.status(workflow_name("q1"))
        assert other.slurm.calls == {}
    finally:
        backend.cancel(workflow_name("q1"))
