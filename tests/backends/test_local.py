"""The local backend with command tasks: real processes, real signals, real files."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from harness.report import command_live_name, read_report
from runs.backends.local import submissions
from runs.backends.local.backend import LocalBackend, workflow_name
from runs.backends.local.pids import process_start
from runs.common.store import TaskFolder
from runs.reads.live_attempts import read_live
from tests.backends.local_fixtures import (
    ended,
    gone,
    phase,
    plan,
    process_of,
    read_log,
    shell,
    stepping,
    submit,
    until_flag,
)
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2, memory_gb=8, grace_s=2
    )


def test_a_command_task_runs_with_its_log_and_a_pid_file_while_it_runs(backend):
    flag = backend.store.parent / "go"
    with stepping(backend):
        submit(
            backend,
            "r1",
            {"hello": {"command": until_flag(flag, before="echo hello")}},
        )
        wait_for(lambda: phase(backend, "r1", "hello") == "Running", what="running")
        logs = backend.store / "runs/r1/tasks/hello/logs"
        pid = json.loads((logs / "hello-0.pid").read_text())
        assert os.getpgid(pid["pid"]) == pid["pid"] == os.getsid(pid["pid"])
        flag.touch()
        wait_for(lambda: ended(backend, "r1"), what="the end")
    status = backend.status(workflow_name("r1"))
    assert status.phase == "Succeeded"
    assert status.tasks == {"hello": "Succeeded"}
    assert status.failed == {}
    assert read_log(backend, "r1", "hello", "hello") == "hello\n"
    assert not (logs / "hello-0.pid").exists()
    assert json.loads((logs / "hello-0.exit").read_text())["exit_code"] == 0


def test_a_task_waits_for_the_tasks_it_reads_and_gets_their_outputs_staged(backend):
    with stepping(backend):
        submit(
            backend,
            "r2",
            {
                "make": {"command": shell('sleep 0.3; echo 42 > "$SIMRUN_OUT/answer"')},
                "read": {
                    "command": shell('cat inputs/table/answer; ls "$SIMRUN_OUT"'),
                    "inputs": {"table": "make"},
                },
            },
        )
        wait_for(lambda: phase(backend, "r2", "make") == "Running", what="make running")
        assert phase(backend, "r2", "read") is None
        wait_for(lambda: ended(backend, "r2"), what="the end")
    assert phase(backend, "r2") == "Succeeded"
    assert read_log(backend, "r2", "read", "read") == "42\n"


def test_a_failing_command_fails_its_node_and_nothing_after_it_starts(backend):
    with stepping(backend):
        submit(
            backend,
            "r3",
            {
                "fail": {"command": shell("echo it broke; echo; exit 3")},
                "after": {"command": ["true"], "inputs": {"x": "fail"}},
            },
        )
        wait_for(lambda: ended(backend, "r3"), what="the end")
    status = backend.status(workflow_name("r3"))
    assert status.phase == "Failed"
    assert status.tasks == {"fail": "Failed"}
    [failure] = status.failed["fail"]
    assert (failure.attempt, failure.exit_code, failure.oom_killed, failure.evicted) == (
        0,
        3,
        False,
        False,
    )
    assert failure.node == backend.hostname
    assert failure.message == "it broke"  # as a pod's termination message


FAIL_ENDED = '"$SIMRUN_TASK_DIR/../fail/logs/fail-0.exit"'


def test_a_failed_node_does_not_keep_an_independent_branch_from_running_as_on_argo(backend):
    with stepping(backend):
        submit(
            backend,
            "r4",
            {
                "fail": {"command": shell("exit 3")},
                "after": {"command": ["true"], "inputs": {"x": "fail"}},
                # ends once fail has ended, so apart is ready only after the failure
                "first": {"command": shell(f"until [ -e {FAIL_ENDED} ]; do sleep 0.05; done")},
                "apart": {"command": ["true"], "inputs": {"x": "first"}},
            },
        )
        wait_for(lambda: ended(backend, "r4"), what="the end")
    status = backend.status(workflow_name("r4"))
    assert status.phase == "Failed"
    assert status.tasks == {"fail": "Failed", "first": "Succeeded", "apart": "Succeeded"}


def test_an_exit_137_without_evidence_of_the_oom_killer_is_no_kill_for_memory(backend):
    with stepping(backend):
        submit(backend, "r4", {"t": {"command": shell("exit 137")}})
        wait_for(lambda: ended(backend, "r4"), what="the end")
    # Retried once with the retry memory, as Argo retries an exit 137; then the node fails.
    first, second = backend.status(workflow_name("r4")).failed["t"]
    assert (first.exit_code, second.exit_code) == (137, 137)
    assert not (first.oom_killed or second.oom_killed or first.evicted or second.evicted)
    assert second.memory_gb == 2 * first.memory_gb


def test_a_process_ended_by_a_signal_simrun_did_not_send_fails_without_a_retry(backend):
    with stepping(backend):
        submit(backend, "r5", {"t": {"command": shell("sleep 60")}})
        pid = process_of(backend, "r5", "t", "t")
        os.killpg(pid, signal.SIGTERM)
        wait_for(lambda: ended(backend, "r5"), what="the end")
    status = backend.status(workflow_name("r5"))
    assert status.phase == "Failed"
    [failed] = status.failed["t"]
    assert (failed.attempt, failed.exit_code, failed.evicted, failed.oom_killed) == (
        0,
        143,
        False,
        False,
    )
    assert not (backend.store / "runs/r5/tasks/t/logs/t-1.launch").exists()


def test_a_process_whose_launcher_was_lost_is_evicted_and_retried(backend):
    backend.step()  # the step of this test is taken by hand, one at a time
    script = 'echo "attempt $SIMRUN_ATTEMPT"; [ "$SIMRUN_ATTEMPT" = 1 ] || sleep 60'
    submit(backend, "r6", {"t": {"command": shell(script)}})
    assert backend.step()
    logs = backend.store / "runs/r6/tasks/t/logs"
    pid = process_of(backend, "r6", "t", "t")
    launcher = json.loads((logs / "t-0.pid").read_text())["launcher"]
    os.kill(launcher, signal.SIGKILL)
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: gone(launcher) and gone(pid), what="the launcher and its process to end")
    assert backend.step()
    [evicted] = backend.status(workflow_name("r6")).failed["t"]
    assert (evicted.exit_code, evicted.evicted, evicted.oom_killed) == (None, True, False)
    assert (logs / "t-1.launch").exists()
    wait_for(lambda: (backend.step(), ended(backend, "r6"))[1], what="the end")
    assert phase(backend, "r6") == "Succeeded"
    assert read_log(backend, "r6", "t", "t", 1) == "attempt 1\n"


def test_cancel_ends_every_process_with_sigterm_then_sigkill_after_the_grace(backend):
    ignoring = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    with stepping(backend):
        submit(
            backend,
            "r8",
            {
                "stubborn": {"command": ["python", "-c", ignoring]},
                "polite": {"command": shell("sleep 60")},
            },
        )
        wait_for(lambda: read_log(backend, "r8", "stubborn", "stubborn") == "up\n", what="up")
        wait_for(lambda: phase(backend, "r8", "polite") == "Running", what="polite running")
        pids = [process_of(backend, "r8", t, t) for t in ("stubborn", "polite")]
        backend.grace_s = 4.0
        cancelled = time.monotonic()
        backend.cancel(workflow_name("r8"))
        wait_for(lambda: process_start(pids[1]) is None, what="polite to end")
        wait_for(lambda: process_start(pids[0]) is None, what="the kill after the grace")
        # Never before the grace; after it, at the step's next look (a loaded machine's late).
        assert backend.grace_s <= time.monotonic() - cancelled <= backend.grace_s + 15.0
        wait_for(lambda: ended(backend, "r8"))
    status = backend.status(workflow_name("r8"))
    assert status.phase == "Failed"
    assert status.message == "Stopped with strategy 'Terminate'"
    assert [f.exit_code for f in status.failed["stubborn"]] == [137]
    assert [f.exit_code for f in status.failed["polite"]] == [143]
    assert not any(f.evicted for fs in status.failed.values() for f in fs)
    assert not (backend.store / "runs/r8/tasks/polite/logs/polite-1.launch").exists()


def test_runs_take_the_cores_in_the_order_of_their_submission(backend, owner):
    from runs.models import Run

    first, second = (Run.objects.create(owner=owner, spec={}, backend="local") for _ in range(2))
    flag = backend.store.parent / "go"
    wait = until_flag(flag)
    with stepping(backend):
        submit(backend, "hold", {"t": {"command": wait}}, {"t": plan(cores=2)})
        wait_for(lambda: phase(backend, "hold", "t") == "Running")
        for run in (second, first):
            created = run.created_at.timestamp()
            submit(
                backend,
                run.id,
                {"t": {"command": ["true"]}},
                {"t": plan(cores=2)},
                created_at=created,
            )
        assert phase(backend, first.id, "t") == phase(backend, second.id, "t") == "Pending"
        flag.touch()
        wait_for(lambda: ended(backend, first.id) and ended(backend, second.id))
    starts = [
        json.loads((backend.store / f"runs/{run}/tasks/t/logs/t-0.launch").read_text())["started"]
        for run in (first.id, second.id)
    ]
    assert starts[0] <= starts[1]
    first_exit = json.loads((backend.store / f"runs/{first.id}/tasks/t/logs/t-0.exit").read_text())
    assert first_exit["ended"] <= starts[1]


def test_a_launch_freed_by_an_end_the_step_read_after_it_began_starts_after_that_end(
    backend, monkeypatch
):
    flag = backend.store.parent / "go"
    backend.step()  # the steps of this test are taken by hand
    submit(backend, "hold", {"t": {"command": until_flag(flag)}}, {"t": plan(cores=2)})
    submit(backend, "next", {"t": {"command": ["true"]}}, {"t": plan(cores=2)})
    backend.step()
    wait_for(lambda: phase(backend, "hold", "t") == "Running")
    exit_file = backend.store / "runs/hold/tasks/t/logs/t-0.exit"
    live = submissions.live

    def ends_meanwhile(state: Path) -> list:
        # The holder ends after the step read the clock, before it reads the runs.
        flag.touch()
        wait_for(exit_file.exists, what="the holder's end")
        return live(state)

    monkeypatch.setattr(submissions, "live", ends_meanwhile)
    backend.step()
    launch = backend.store / "runs/next/tasks/t/logs/t-0.launch"
    assert launch.exists(), "the freed cores start the next run in the same step"
    ended_at = json.loads(exit_file.read_text())["ended"]
    assert json.loads(launch.read_text())["started"] >= ended_at


def test_the_process_gets_the_simrun_environment_and_none_of_the_service_configuration(
    backend, monkeypatch
):
    monkeypatch.setenv("SECRET_KEY", "do-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    with stepping(backend):
        submit(
            backend,
            "r9",
            {"env": {"command": shell("env | sort")}},
            {"env": plan(cores=2, memory_gb=0.5)},
        )
        wait_for(lambda: ended(backend, "r9"))
    env = dict(
        line.split("=", 1)
        for line in read_log(backend, "r9", "env", "env").splitlines()
        if "=" in line
    )
    assert (
        "SECRET_KEY" not in env
        and "DATABASE_URL" not in env
        and "DJANGO_SETTINGS_MODULE" not in env
    )
    assert env["SIMRUN_TASK_DIR"] == str(backend.store / "runs/r9/tasks/env")
    assert env["SIMRUN_OUT"] == str(backend.store / "runs/r9/tasks/env/out")
    assert env["SIMRUN_ATTEMPT"] == "0"
    assert env["SIMRUN_WORKER"] == "env"
    assert env["SIMRUN_CORES"] == "2"
    assert env["SIMRUN_MEMORY_LIMIT_GB"] == "0.5"
    assert env["SIMRUN_MEMORY_SOURCE"] == ("cgroup" if backend.enforces_memory else "process")
    assert env["SIMRUN_SCRATCH"] == str(backend.scratch / "r9" / "env-0")
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_without_memory_cgroups_a_plain_command_reports_its_largest_process(tmp_path):
    backend = LocalBackend(tmp_path / "store", tmp_path / "scratch", enforce_memory=False)
    touch = "import sys; block = b'x' * (int(sys.argv[1]) * 2**20)"
    with stepping(backend):
        submit(backend, "r11", {"alloc": {"command": ["python", "-c", touch, "120"]}})
        wait_for(lambda: ended(backend, "r11"))
    report = read_report(backend.store / "runs/r11/tasks/alloc/workers/alloc-0.json")
    assert report.peak_source == "rusage-maxrss"
    assert 120 * 2**20 <= report.peak_memory_bytes < 400 * 2**20


def test_a_report_a_command_wrote_itself_is_kept(tmp_path):
    backend = LocalBackend(tmp_path / "store", tmp_path / "scratch", enforce_memory=False)
    own = shell('cd "$SIMRUN_TASK_DIR" && mkdir -p workers && echo mine > workers/own-0.json')
    with stepping(backend):
        submit(backend, "r12", {"own": {"command": own}})
        wait_for(lambda: ended(backend, "r12"))
    assert (backend.store / "runs/r12/tasks/own/workers/own-0.json").read_text() == "mine\n"


def test_without_memory_cgroups_the_harness_reads_the_memory_of_its_process_tree(tmp_path):
    backend = LocalBackend(tmp_path / "store", tmp_path / "scratch", enforce_memory=False)
    assert not backend.enforces_memory
    with stepping(backend):
        submit(backend, "r10", {"env": {"command": shell('echo "$SIMRUN_MEMORY_SOURCE"')}})
        wait_for(lambda: ended(backend, "r10"))
    assert read_log(backend, "r10", "env", "env") == "process\n"


def test_subscribers_are_called_after_a_start_and_after_an_end(backend):
    calls: list[str] = []
    backend.subscribe(lambda: calls.append(phase(backend, "r11", "t") or ""))
    flag = backend.store.parent / "go"
    with stepping(backend):
        submit(backend, "r11", {"t": {"command": until_flag(flag)}})
        wait_for(
            lambda: any(c in {"Pending", "Running"} for c in calls), what="a call at the start"
        )
        flag.touch()
        wait_for(lambda: "Succeeded" in calls, what="a call at the end")


def test_subscribers_hear_at_once_that_a_process_began_and_it_starts_then(backend):
    """No step polls here (an hour apart): only the launcher's wake-up makes the step see the
    process, and the attempt's start is the process's, not its launch's."""
    calls: list[str] = []
    backend.subscribe(lambda: calls.append(phase(backend, "r12", "t") or ""))
    flag = backend.store.parent / "go"
    with stepping(backend, poll_s=3600):
        submit(backend, "r12", {"t": {"command": until_flag(flag)}})
        process_of(backend, "r12", "t", "t")
        wait_for(lambda: "Running" in calls, timeout_s=20, what="a call once it runs")
        pid_file = json.loads((backend.store / "runs/r12/tasks/t/logs/t-0.pid").read_text())
        started = backend.status(workflow_name("r12")).started["t"]
        assert started == pid_file["started"]
        flag.touch()
        wait_for(lambda: "Succeeded" in calls, what="a call at the end")


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "process-tree"])
def test_a_plain_command_has_live_memory_while_it_runs(tmp_path, cgroup):
    backend = LocalBackend(
        tmp_path / "store", tmp_path / "scratch", cores=2, memory_gb=8, enforce_memory=cgroup
    )
    assert backend.enforces_memory == cgroup
    flag = backend.store.parent / "go"
    hold = (
        "import os, time; b = bytearray(64 << 20); "
        f"[time.sleep(0.05) for _ in iter(lambda: os.path.exists({str(flag)!r}), True)]"
    )
    folder = TaskFolder(backend.store, ("runs", "r13", "tasks", "t"))
    with stepping(backend):
        submit(backend, "r13", {"t": {"command": ["python3", "-c", hold]}})
        live = wait_for(
            lambda: (found := read_live(folder, "t", 0)) and len(found.samples) >= 2 and found,
            what="two live samples",
        )
        assert live.peak_bytes is not None and live.peak_bytes >= 60 << 20
        logs = backend.store / "runs/r13/tasks/t/logs"
        assert (logs / command_live_name("t-0")).stat().st_uid == os.geteuid()
        assert not (backend.store / "runs/r13/tasks/t/live").exists()
        flag.touch()
        wait_for(lambda: ended(backend, "r13"), what="the end")


def test_an_unknown_run_is_a_key_error(backend):
    for call in (backend.status, backend.cancel, backend.stop):
        with pytest.raises(KeyError):
            call("simrun-unknown")
    with pytest.raises(KeyError):
        backend.logs("simrun-unknown", "t")


def test_a_run_submitted_twice_is_kept(backend):
    submit(backend, "r12", {"t": {"command": ["true"]}})
    submitted = (backend.state / "runs/simrun-r12.json").read_text()
    assert submit(backend, "r12", {"other": {"command": ["false"]}}) == "simrun-r12"
    assert (backend.state / "runs/simrun-r12.json").read_text() == submitted


def test_only_the_latest_ended_runs_are_kept(backend, monkeypatch):
    monkeypatch.setattr(submissions, "ENDED_KEPT", 2)
    with stepping(backend):
        for run in ("e1", "e2", "e3"):
            submit(backend, run, {"t": {"command": ["true"]}})
            wait_for(lambda run=run: (backend.state / "ended" / workflow_name(run)).exists())
            os.utime(
                backend.state / "ended" / workflow_name(run), (0, {"e1": 1, "e2": 2, "e3": 3}[run])
            )
        backend.step()
    with pytest.raises(KeyError):
        backend.status(workflow_name("e1"))
    assert phase(backend, "e2") == phase(backend, "e3") == "Succeeded"


def test_submit_refuses_a_run_it_cannot_run(backend):
    with pytest.raises(ValueError, match="no task of the run"):
        submit(backend, "bad1", {"t": {"command": ["true"], "inputs": {"x": "missing"}}})
    with pytest.raises(ValueError, match="unknown task type"):
        submit(backend, "bad2", {"t": {"kind": "plugin", "type": "no-such-type"}})
    with pytest.raises(ValueError, match="not splittable"):
        submit(backend, "bad3", {"t": {"kind": "split", "type": "csv-stats"}})
    backend.close()
    with pytest.raises(RuntimeError):
        submit(backend, "bad4", {"t": {"command": ["true"]}})


def test_commands_in_images_without_a_docker_engine_are_a_clear_error_not_a_hang(backend):
    with pytest.raises(ValueError, match="no Docker engine"):
        submit(
            backend,
            "d1",
            {"t": {"command": ["true"], "image": "alpine:3"}},
            local_commands="docker",
        )


def test_logs_nodes_and_placements(backend):
    flag = backend.store.parent / "go"
    with stepping(backend):
        submit(
            backend,
            "r13",
            {"t": {"command": until_flag(flag, before="seq 5")}},
            {"t": plan(cores=2, memory_gb=1.5)},
        )
        wait_for(lambda: "5" in read_log(backend, "r13", "t", "t"))
        [placement] = backend.placements()
        assert (placement.workflow, placement.dag_task, placement.node) == (
            "simrun-r13",
            "t",
            backend.hostname,
        )
        assert (placement.cores, placement.memory_gb, placement.worker, placement.attempt) == (
            2,
            1.5,
            "t",
            0,
        )
        [log] = backend.logs("simrun-r13", "t", tail_lines=2)
        assert (log.text, log.done, log.attempt, log.pod) == ("4\n5\n", False, 0, "t-0")
        flag.touch()
        wait_for(lambda: ended(backend, "r13"))
    assert backend.placements() == []
    [log] = backend.logs("simrun-r13", "t")
    assert (log.text, log.done) == ("1\n2\n3\n4\n5\n", True)
    [machine] = backend.nodes()
    assert (machine.name, machine.cores, machine.memory_gb) == (backend.hostname, 2, 8)


def test_reservations_and_image_builds_are_refused_and_every_image_is_there(backend):
    with pytest.raises(ValueError):
        backend.reserve("node", "run")
    with pytest.raises(ValueError):
        backend.unreserve("node", "run")
    with pytest.raises(ValueError):
        backend.build_image(Path("."), "image:1")
    assert backend.has_image("anything:1")


def test_stop_ends_a_decided_run_as_cancel_does(backend):
    with stepping(backend):
        submit(backend, "r14", {"t": {"command": shell("sleep 60")}})
        pid = process_of(backend, "r14", "t", "t")
        backend.stop(workflow_name("r14"))
        wait_for(lambda: process_start(pid) is None, timeout_s=backend.grace_s + 1.0)
        wait_for(lambda: ended(backend, "r14"))
    status = backend.status(workflow_name("r14"))
    assert status.message == "Stopped with strategy 'Stop'"
    assert [(f.exit_code, f.evicted) for f in status.failed["t"]] == [(143, False)]


def test_a_step_while_another_process_steps_returns_at_once_and_starts_nothing(backend):
    import subprocess
    import sys

    submit(backend, "lock1", {"t": {"command": shell("true")}})
    backend.state.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)",
            str(backend.state / "step.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        began = time.monotonic()
        assert backend.step() is False
        assert time.monotonic() - began < 60.0, "it does not wait for the other step (120 s)"
        launches = backend.store / "runs/lock1/tasks/t/logs"
        assert not list(launches.glob("*.launch")), "nothing started"
    finally:
        holder.kill()
        holder.wait()
    assert backend.step() is True
    assert [p.name for p in launches.glob("*.launch")] == ["t-0.launch"]
    wait_for(lambda: ended(backend, "lock1"), what="the end")
