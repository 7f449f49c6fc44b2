"""The Slurm commands the backend really runs, counted on the real clusters of ``.ci/slurm``.

Each Slurm command goes through a shim first on PATH that writes its arguments to a log and
then execs the real command (not a fake of Slurm: Slurm answers). One ``sacct`` asks for
every job that left the queue, however many runs and tasks; a controller that does not
answer backs the polls off, so no command is run until the next is due, and nothing fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from runs.backends.base import BackendUnavailable, workflow_name
from runs.backends.slurm.commands import Slurm
from tests.backends.slurm_cluster import (
    cluster,
    job_state,
    make_backend,
    shell,
    start_cluster,
    submit,
)
from tests.backends.slurm_serve import daemon_pid
from tests.polling import wait_for

COMMANDS = ("squeue", "sacct", "sbatch", "scancel", "sinfo", "scontrol", "sacctmgr")


@pytest.fixture
def calls(tmp_path: Path, monkeypatch) -> Path:
    """The log of the Slurm commands run from now on: one line a call, its arguments."""
    shims, log = tmp_path / "shims", tmp_path / "calls"
    shims.mkdir()
    log.touch()
    for name in COMMANDS:
        real = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        assert real, f"{name} is not installed"
        shim = shims / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexec {real} "$@"\n')
        shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return log


def commands(log: Path) -> list[str]:
    """The Slurm commands run since the log was last emptied, one a call, in order."""
    return [line.split()[0] for line in log.read_text().splitlines()]


@pytest.mark.slurm_noacct
def test_one_sacct_asks_for_every_job_that_left_the_queue(calls, tmp_path):
    """Three runs of two tasks each, their six jobs ended and forgotten by Slurm while the
    service did not poll (without accounting: MinJobAge=30): the next poll runs one squeue
    and one sacct naming all six, and resolves each job from its log in the store."""
    conf = cluster("--accounting=off")
    backend = make_backend(tmp_path / "store", conf, poll_s=3600)
    tasks = {"ok": {"command": shell("true")}, "bad": {"command": shell("exit 3")}}
    runs = ["a1", "a2", "a3"]
    for run in runs:
        submit(backend, run, tasks)
    jobs = [j.job_id for r in runs for j in backend.ledger.read(workflow_name(r)).jobs]
    assert len(jobs) == 6
    wait_for(
        lambda: not any(job_state(conf, job) for job in jobs),
        timeout_s=180,
        interval_s=1,
        what="Slurm to forget the jobs",
    )
    calls.write_text("")

    backend.poll(force=True)

    assert commands(calls) == ["squeue", "sacct"]
    asked = calls.read_text().splitlines()[1].split(" -j ")[1].split()[0].split(",")
    assert sorted(asked) == sorted(jobs)
    for run in runs:
        status = backend.status(workflow_name(run))
        assert status.tasks == {"ok": "Succeeded", "bad": "Failed"}
        [failed] = status.failed["bad"]
        assert failed.exit_code == 3 and not failed.evicted
        assert len(backend.ledger.read(workflow_name(run)).jobs) == 2
    calls.write_text("")
    backend.poll(force=True)
    assert commands(calls) == ["squeue"]  # every job is final: sacct is asked no more


def test_a_controller_that_does_not_answer_backs_the_polls_off(calls, tmp_path):
    """slurmctld stopped: each poll due runs one squeue, which fails ("Unable to contact slurm
    controller"); the next is due two, then four poll periods later, and the polls and
    statuses asked meanwhile run no command. The run's task stays running; once the
    controller is back, the next due poll succeeds and the task ends."""
    backend = make_backend(tmp_path / "store", cluster(), poll_s=1.0)
    submit(backend, "k1", {"work": {"command": shell("sleep 4")}})
    name = workflow_name("k1")
    wait_for(lambda: backend.status(name).tasks == {"work": "Running"}, what="the task to run")
    pid = daemon_pid("on", "slurmctld")
    os.kill(pid, signal.SIGTERM)
    try:
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), what="slurmctld to stop")
        calls.write_text("")
        for failures in (1, 2):
            began = time.time()
            with pytest.raises(BackendUnavailable, match="Unable to contact slurm controller"):
                backend.poll()
            assert commands(calls) == ["squeue"]
            calls.write_text("")
            due = backend_next(backend)
            assert due - began >= backend.poll_s * 2**failures - 0.5
            while time.time() < due - 0.2:  # the polls and statuses the service asks meanwhile
                assert not backend.poll()
                assert backend.status(name).tasks == {"work": "Running"}
                time.sleep(0.1)  # pacing the asks, not waiting for anything
            assert commands(calls) == []
            wait_for(lambda t=due: time.time() >= t, timeout_s=10, what="the next poll to be due")
    finally:
        start_cluster()
    wait_for(
        lambda: backend.status(name).tasks == {"work": "Succeeded"},
        timeout_s=120,
        interval_s=0.5,
        what="the task to end",
    )
    assert "sbatch" not in commands(calls)


def backend_next(backend) -> float:
    """When the backend's next poll is due (its meta file, which every process reads)."""
    return float(json.loads(backend.ledger.read_meta("poll.json") or "{}")["next"])


@pytest.mark.parametrize(
    "words",
    [
        "squeue: error: Socket timed out on send/recv operation",
        "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection",
        "squeue: error: Unable to contact slurm controller (connect failure)",
        "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
    ],
)
def test_a_busy_controllers_words_make_the_backend_unavailable(words):
    """Slurm's words for a controller that cannot answer now raise BackendUnavailable (the
    loop backs off), not an error that would fail a run (a command saying them)."""
    slurm = Slurm()
    with pytest.raises(BackendUnavailable, match=words.partition("error: ")[2][:20]):
        slurm.run(["sh", "-c", f"echo '{words}' >&2; exit 1"])
