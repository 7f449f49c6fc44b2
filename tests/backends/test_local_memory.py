"""Memory on the local backend: a cgroup per process with the plan's limit, real OOM kills."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.report import read_report
from runs.backends.base import RETRYING_PHASE
from runs.backends.local.backend import LocalBackend, cgroups, workflow_name
from runs.backends.local.launch import cgroup_name
from tests.backends.local_fixtures import (
    ended,
    phase,
    plan,
    process_of,
    read_log,
    stepping,
    submit,
    until_flag,
)
from tests.polling import wait_for

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        cgroups.detect() is None, reason="this machine lets no process create memory cgroups"
    ),
]

# Allocates and touches MiB (``b"x" * n`` writes every page), then reports the limit it had.
ALLOC = (
    "import os, sys; block = b'x' * (int(sys.argv[1]) * 2**20); "
    "print('survived', os.environ['SIMRUN_ATTEMPT'], os.environ['SIMRUN_MEMORY_LIMIT_GB'])"
)


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    backend = LocalBackend(tmp_path / "store", tmp_path / "scratch", cores=2, memory_gb=8)
    assert backend.enforces_memory
    return backend


def test_each_process_runs_in_a_memory_cgroup_of_its_own_with_the_plan_as_limit(backend):
    flag = backend.store.parent / "go"
    command = until_flag(flag, before="cat /proc/self/cgroup")
    with stepping(backend):
        submit(backend, "m0", {"t": {"command": command}}, {"t": plan(memory_gb=0.25)})
        pid = process_of(backend, "m0", "t", "t")
        cgroup = backend.hierarchy.parent / cgroup_name(backend, "m0", "t", 0)
        assert pid in cgroups.pids(cgroup)
        limit = int((cgroup / backend.hierarchy.limit_file).read_text())
        assert limit == 0.25 * 2**30
        flag.touch()
        wait_for(lambda: phase(backend, "m0") == "Succeeded")
    assert not cgroup.exists()
    assert cgroup_name(backend, "m0", "t", 0) in read_log(backend, "m0", "t", "t")


def test_a_kill_for_memory_is_proven_and_retried_once_with_the_retry_memory(backend):
    plans = {"alloc": plan(memory_gb=0.2, retry_memory_gb=0.6)}
    with stepping(backend):
        submit(backend, "m1", {"alloc": {"command": ["python", "-c", ALLOC, "350"]}}, plans)
        wait_for(lambda: ended(backend, "m1"))
    status = backend.status(workflow_name("m1"))
    assert status.phase == "Succeeded"
    [killed] = status.failed["alloc"]
    assert (killed.attempt, killed.exit_code, killed.oom_killed, killed.evicted) == (
        0,
        137,
        True,
        False,
    )
    assert read_log(backend, "m1", "alloc", "alloc", 1) == "survived 1 0.6\n"


def test_a_second_kill_for_memory_with_the_retry_memory_fails_the_node(backend):
    plans = {"alloc": plan(memory_gb=0.2, retry_memory_gb=0.3)}
    backend.step()
    submit(backend, "m2", {"alloc": {"command": ["python", "-c", ALLOC, "500"]}}, plans)
    backend.step()
    wait_for(lambda: backend.status(workflow_name("m2")).tasks["alloc"] == RETRYING_PHASE)
    with stepping(backend):
        wait_for(lambda: ended(backend, "m2"))
    status = backend.status(workflow_name("m2"))
    assert status.phase == "Failed"
    assert status.tasks == {"alloc": "Failed"}
    assert [(f.attempt, f.oom_killed) for f in status.failed["alloc"]] == [(0, True), (1, True)]
    assert not (backend.store / "runs/m2/tasks/alloc/logs/alloc-2.launch").exists()


def test_a_plain_command_gets_a_report_of_its_peak_from_its_cgroup(backend):
    """A plain command writes no report; the launcher writes its cgroup's high-water mark."""
    with stepping(backend):
        submit(
            backend,
            "m9",
            {"alloc": {"command": ["python", "-c", ALLOC, "200"]}},
            {"alloc": plan(memory_gb=0.5)},
        )
        wait_for(lambda: ended(backend, "m9"))
    assert phase(backend, "m9") == "Succeeded"
    report = read_report(backend.store / "runs/m9/tasks/alloc/workers/alloc-0.json")
    assert report.peak_source == f"cgroup-v{backend.hierarchy.version}-" + (
        "max-usage" if backend.hierarchy.version == 1 else "peak"
    )
    assert 200 * 2**20 <= report.peak_memory_bytes < 0.5 * 2**30
    assert report.memory_limit_bytes == 0.5 * 2**30 and report.processes == 1
    assert not report.failed and report.completed and report.worker == "alloc"
