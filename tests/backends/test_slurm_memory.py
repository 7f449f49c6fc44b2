"""Kills for memory on the real Slurm cluster: OUT_OF_MEMORY is a proven kill, retried once
with the retry memory; a second kill with the retry memory ends the node (Ruling 35)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.slurm.backend import SlurmBackend
from tests.backends.slurm_cluster import cluster, make_backend, plan, submit, wait_phase


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    return cluster()


@pytest.fixture
def backend(tmp_path: Path, slurm_conf: str) -> SlurmBackend:
    return make_backend(tmp_path / "store", slurm_conf)


def alloc(mib: int) -> list[str]:
    """A command that holds ``mib`` MiB, then exits 0 (a killed child does not fail it)."""
    return ["sh", "-c", f"python3 -c 'x = bytearray({mib} << 20); print(len(x))'; exit 0"]


def test_a_kill_for_memory_is_retried_once_with_the_retry_memory(backend):
    # 300 MiB: killed under 0.25 GiB, fits in the retry memory of 1 GiB.
    submit(backend, "m1", {"big": {"command": alloc(300)}}, {"big": plan(retry_memory_gb=1.0)})
    assert wait_phase(backend, "m1", {"Succeeded", "Failed"}, timeout_s=180) == "Succeeded"
    status = backend.status(workflow_name("m1"))
    [killed] = status.failed["big"]
    assert killed.attempt == 0 and killed.oom_killed and killed.memory_gb == 0.25
    assert "OUT_OF_MEMORY" in killed.message
    jobs = backend.ledger.read(workflow_name("m1")).jobs
    assert [(j.attempt, j.memory_gb, j.state) for j in jobs] == [
        (0, 0.25, "OUT_OF_MEMORY"),
        (1, 1.0, "COMPLETED"),
    ]


@pytest.mark.parametrize("retry_gb", [0.5, 0.25], ids=["larger", "at-the-limit"])
def test_a_second_kill_with_the_retry_memory_fails_the_node(backend, retry_gb):
    """Also where the plan is at the limit (the largest node's memory, which the retry
    memory cannot exceed: retry = plan, issue 47): the second kill ends the node all the
    same, with no third attempt."""
    run = f"m2{retry_gb * 100:.0f}"  # a job name of its own: an earlier one is not adopted
    plans = {"big": plan(retry_memory_gb=retry_gb)}
    submit(backend, run, {"big": {"command": alloc(900)}}, plans)
    assert wait_phase(backend, run, {"Failed"}, node="big", timeout_s=180) == "Failed"
    failed = backend.status(workflow_name(run)).failed["big"]
    assert [(a.attempt, a.oom_killed, a.memory_gb) for a in failed] == [
        (0, True, 0.25),
        (1, True, retry_gb),
    ]
    assert len(backend.ledger.read(workflow_name(run)).jobs) == 2
