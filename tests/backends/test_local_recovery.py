"""A restarted local backend: live runs adopted, orphans killed, lost launchers recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from runs.backends.base import PREEMPTED_PHASE
from runs.backends.local.backend import LocalBackend, workflow_name
from runs.backends.local.launch import cgroup_name
from runs.backends.local.pids import process_cmdline, process_start
from runs.backends.local.submissions import read_json, write_own_json
from tests.backends.local_fixtures import (
    log_of,
    phase,
    process_of,
    read_log,
    stepping,
    submit,
    until_flag,
)
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


def new_backend(tmp_path: Path) -> LocalBackend:
    """A backend on the store of the test, as a service started anew has it."""
    return LocalBackend(tmp_path / "store", tmp_path / "scratch", cores=2, memory_gb=8, grace_s=2)


def test_a_restarted_backend_adopts_the_processes_of_live_runs(tmp_path):
    before = new_backend(tmp_path)
    flag = tmp_path / "go"
    before.step()
    submit(before, "a1", {"t": {"command": until_flag(flag, after="echo done")}})
    before.step()
    pid = process_of(before, "a1", "t", "t")
    after = new_backend(tmp_path)
    assert after.kill_orphans() == 0
    assert process_start(pid) is not None
    assert phase(after, "a1", "t") == "Running"
    with stepping(after):
        flag.touch()
        wait_for(lambda: phase(after, "a1") == "Succeeded")
    assert read_log(after, "a1", "t", "t") == "done\n"


def test_kill_orphans_kills_the_processes_of_unknown_and_ended_runs(tmp_path):
    before = new_backend(tmp_path)
    before.step()
    submit(before, "o1", {"t": {"command": until_flag(tmp_path / "never")}})
    submit(before, "o2", {"t": {"command": until_flag(tmp_path / "never")}})
    before.step()
    pids = [process_of(before, run, "t", "t") for run in ("o1", "o2")]
    (before.state / "runs" / "simrun-o1.json").unlink()  # forgotten: an unknown run
    (before.state / "ended").mkdir()
    (before.state / "ended" / "simrun-o2").touch()  # ended, yet its process still runs
    after = new_backend(tmp_path)
    assert after.kill_orphans() == 2
    for pid in pids:
        wait_for(lambda pid=pid: process_start(pid) is None, what=f"{pid} to end")
    assert not log_of(after, "o1", "t", "t").with_suffix(".pid").exists()
    assert not log_of(after, "o2", "t", "t").with_suffix(".pid").exists()


def test_kill_orphans_never_kills_a_process_that_reuses_the_pid_of_a_file(tmp_path):
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        pid_file = tmp_path / "store/runs/gone/tasks/t/logs/t-0.pid"
        pid_file.parent.mkdir(parents=True)
        pid = bystander.pid
        names = {"pid": pid, "start": process_start(pid) - 1, "cmdline": process_cmdline(pid)}
        write_own_json(pid_file, names | {"launcher": pid, "launcher_start": 0})
        assert new_backend(tmp_path).kill_orphans() == 0
        assert bystander.poll() is None
        assert not pid_file.exists()
        write_own_json(pid_file, names | {"start": process_start(pid), "cmdline": ["sleep", "61"]})
        assert new_backend(tmp_path).kill_orphans() == 0
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_process_whose_launcher_died_without_a_record_is_lost_and_retried(tmp_path):
    backend = new_backend(tmp_path)
    backend.step()
    script = '[ "$SIMRUN_ATTEMPT" = 1 ] && echo retried || sleep 60'
    submit(backend, "l1", {"t": {"command": ["sh", "-c", script]}})
    backend.step()
    pid = process_of(backend, "l1", "t", "t")
    names = read_json(log_of(backend, "l1", "t", "t").with_suffix(".pid"))
    os.kill(names["launcher"], signal.SIGKILL)
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: process_start(pid) is None)
    backend.step()
    status = backend.status(workflow_name("l1"))
    [lost] = status.failed["t"]
    assert (lost.exit_code, lost.evicted) == (None, True)
    assert "lost" in lost.message
    assert status.tasks["t"] in {PREEMPTED_PHASE, "Pending", "Running"}
    with stepping(backend):
        wait_for(lambda: phase(backend, "l1") == "Succeeded")
    assert read_log(backend, "l1", "t", "t", 1) == "retried\n"


def test_kill_orphans_leaves_the_cgroups_of_another_service_s_runs(tmp_path):
    backend = new_backend(tmp_path)
    if backend.pids_parent is None:
        pytest.skip("no pids cgroups here (not root)")
    (tmp_path / "store" / "runs" / "ours").mkdir(parents=True)
    ended = backend.pids_parent / cgroup_name(backend, "ours", "t", 0)
    theirs = backend.pids_parent / f"theirs{os.getpid()}.t.0"  # made, not yet joined
    # Another service's (a test's in parallel) of a run with the same id: made, not yet joined.
    same_id = backend.pids_parent / f"ours.t.0.other{os.getpid()}"
    for cgroup in (ended, theirs, same_id):
        cgroup.mkdir(exist_ok=True)
    try:
        backend.kill_orphans()
        assert theirs.is_dir() and same_id.is_dir() and not ended.exists()
    finally:
        for cgroup in (ended, theirs, same_id):
            with contextlib.suppress(FileNotFoundError):
                cgroup.rmdir()
