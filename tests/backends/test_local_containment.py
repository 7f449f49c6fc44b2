"""Without memory cgroups: every descendant of a task ends with it, and only simrun's signals
are evictions (real processes, real signals)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.backends.local.backend import LocalBackend, workflow_name
from tests.backends.local_fixtures import (
    ended,
    gone,
    log_of,
    phase,
    plan,
    read_log,
    shell,
    stepping,
    submit,
)
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        store=tmp_path / "store",
        scratch=tmp_path / "scratch",
        cores=2,
        memory_gb=8,
        grace_s=1,
        enforce_memory=False,
    )


def escaping_child(pid_file: Path, ignore_term: bool = False) -> str:
    """A child in a session of its own (as ``setsid``/``nohup`` make) that writes its pid."""
    trap = "trap '' TERM; " if ignore_term else ""
    # \$\$: the inner shell's pid, not the outer one's (which expands "...").
    inner = f"{trap}echo \\$\\$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 300"
    return f'setsid sh -c "{inner}" & until [ -e {pid_file} ]; do sleep 0.05; done'


def test_a_setsid_child_of_a_task_ends_with_the_task(backend, tmp_path):
    child = tmp_path / "child.pid"
    with stepping(backend):
        submit(backend, "c1", {"t": {"command": shell(escaping_child(child))}})
        wait_for(lambda: ended(backend, "c1"), what="the task's end")
        assert phase(backend, "c1") == "Succeeded"
        wait_for(lambda: gone(int(child.read_text())), timeout_s=5, what="the child to end")


def test_cancel_ends_a_setsid_child_that_ignores_sigterm(backend, tmp_path):
    child = tmp_path / "child.pid"
    script = escaping_child(child, ignore_term=True) + "; sleep 300"
    with stepping(backend):
        submit(backend, "c2", {"t": {"command": shell(script)}})
        wait_for(child.exists, what="the child's pid")
        pid = int(child.read_text())
        backend.cancel(workflow_name("c2"))
        wait_for(lambda: ended(backend, "c2"), what="the cancelled run's end")
        wait_for(lambda: gone(pid), timeout_s=5, what="the child to end")


def test_a_task_that_signals_itself_fails_without_a_retry(backend):
    with stepping(backend):
        submit(backend, "c3", {"t": {"command": shell("kill -TERM $$")}})
        submit(backend, "c4", {"t": {"command": shell("exit 143")}})
        wait_for(lambda: ended(backend, "c3") and ended(backend, "c4"), what="the ends")
    for run in ("c3", "c4"):
        status = backend.status(workflow_name(run))
        assert status.phase == "Failed"
        [failed] = status.failed["t"]
        assert (failed.exit_code, failed.evicted, failed.oom_killed) == (143, False, False)


def test_a_sigkill_without_cgroup_evidence_is_retried_once_with_the_retry_memory(backend):
    script = 'echo "limit $SIMRUN_MEMORY_LIMIT_GB"; kill -KILL $$'
    with stepping(backend):
        submit(
            backend,
            "c5",
            {"t": {"command": shell(script)}},
            {"t": plan(memory_gb=1.0, retry_memory_gb=2.0)},
        )
        wait_for(lambda: ended(backend, "c5"), what="the end")
    status = backend.status(workflow_name("c5"))
    assert status.phase == "Failed"
    assert [(f.attempt, f.exit_code, f.oom_killed) for f in status.failed["t"]] == [
        (0, 137, False),
        (1, 137, False),
    ]
    assert "retried once with the retry memory" in status.failed["t"][0].message
    assert read_log(backend, "c5", "t", "t", 0) == "limit 1\n"
    assert read_log(backend, "c5", "t", "t", 1) == "limit 2\n"
    assert not log_of(backend, "c5", "t", "t", 2).with_suffix(".launch").exists()


def test_a_cancel_is_recorded_as_sent_by_simrun(backend):
    with stepping(backend):
        submit(backend, "c6", {"t": {"command": shell("sleep 300")}})
        wait_for(lambda: phase(backend, "c6", "t") == "Running", what="running")
        backend.cancel(workflow_name("c6"))
        wait_for(lambda: ended(backend, "c6"), what="the end")
    end = json.loads(log_of(backend, "c6", "t", "t").with_suffix(".exit").read_text())
    assert (end["exit_code"], end["signal"], end["stopped_by_simrun"]) == (143, 15, True)
