"""Real kills for memory in a child memory cgroup, and the evidence the reports give of them.

An exit 137 alone proves nothing (Rulings 34, 39): only the change of the OOM killer's counter
of the cgroup while the worker ran does. The cgroup keeps counting across workers, so a kill
that is no OOM kill in a cgroup that had one before must still report none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.memory import Evidence, descendants
from tests.harness.processes import clean_environ, finish, spawn
from tests.harness.task_dirs import claims, make_task, report_of
from tests.polling import wait_for

from .cgroup import child_cgroup

LIMIT = 256 << 20
GREEDY = "b = bytearray(600 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"
STUBBORN = (
    "import pathlib, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "pathlib.Path('sigterm-ignored').write_text('')\ntime.sleep(60)"
)


def _alloc_task(store: Path, task: str, **settings: object) -> Path:
    return make_task(store, "alloc", settings, task=task, base_gb=0.05, per_worker_gb=0.1)


def test_a_worker_killed_for_memory_exits_137_and_its_report_counts_the_kill(
    store: Path, logs: Path
) -> None:
    task_dir = _alloc_task(store, "greedy", units=1, mb=600)
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_CORES="1")
    with child_cgroup(LIMIT) as group:
        process = spawn("worker", env, logs / "w0.log", preexec_fn=group.enter)
        code = finish(process, logs / "w0.log")
        counted = group.oom_kills()

        # The same cgroup again, whose counter says 1 already: a kill that is no OOM kill
        # (a SIGKILL as after a grace period) is no evidence.
        calm = _alloc_task(store, "calm", units=1, mb=16, hold_s=60)
        env["SIMRUN_TASK_DIR"] = str(calm)
        process = spawn("worker", env, logs / "calm.log", preexec_fn=group.enter)
        wait_for(lambda: claims(calm) and descendants(process.pid), 30, "the unit to run")
        for pid in descendants(process.pid):
            os.kill(pid, signal.SIGKILL)
        calm_code = finish(process, logs / "calm.log")

    assert code == 137, (logs / "w0.log").read_text()
    report = report_of(task_dir, "greedy-w0")
    assert report.oom_kills >= 1 and counted >= 1
    assert not report.failed and report.units_done == []
    assert report.memory_limit_bytes == LIMIT and report.processes == 1
    assert report.peak_memory_bytes is not None  # sampled; a kill may come between samples
    assert claims(task_dir) == []

    assert calm_code == 137, (logs / "calm.log").read_text()
    assert report_of(calm, "calm-w0").oom_kills == 0
    assert claims(calm) == []


def test_a_command_killed_for_memory_exits_137_and_a_stubborn_one_stopped_reports_no_kill(
    store: Path, logs: Path
) -> None:
    task_dir = make_task(store, "csv-stats", {}, task="greedy", kind="plugin")
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_SCRATCH=str(store / "scratch"))
    with child_cgroup(LIMIT) as group:
        process = spawn(
            "exec", env, logs / "exec.log", "python", "-c", GREEDY, preexec_fn=group.enter
        )
        code = finish(process, logs / "exec.log")

        env.update(SIMRUN_GRACE_S="0.5", SIMRUN_WORKER="stubborn", SIMRUN_ATTEMPT="1")
        process = spawn(
            "exec", env, logs / "stubborn.log", "python", "-c", STUBBORN, preexec_fn=group.enter
        )
        wait_for(lambda: (store / "scratch" / "sigterm-ignored").exists(), 30, "the command")
        os.kill(process.pid, signal.SIGTERM)
        stubborn_code = finish(process, logs / "stubborn.log", timeout=20)

    assert code == 137, (logs / "exec.log").read_text()
    report = report_of(task_dir, "greedy")
    assert report.oom_kills >= 1 and not report.failed
    assert stubborn_code == 143, (logs / "stubborn.log").read_text()
    stubborn = report_of(task_dir, "stubborn", attempt=1)
    assert stubborn.oom_kills == 0 and not stubborn.failed


def test_evidence_counts_the_kills_after_it_began_not_before() -> None:
    with child_cgroup(64 << 20) as group:

        def kill_one() -> None:
            subprocess.run([sys.executable, "-c", GREEDY], preexec_fn=group.enter, check=False)

        kill_one()
        assert group.oom_kills() >= 1
        script = (
            "import json, subprocess, sys\nfrom harness.memory import Evidence\n"
            "evidence = Evidence('cgroup')\nbefore = evidence.oom_kills()\n"
            f"subprocess.run([sys.executable, '-c', {GREEDY!r}])\n"
            "print(json.dumps([before, evidence.oom_kills()]))"
        )
        output = group.python(script)

    assert output.strip() == "[0, 1]"
    assert Evidence("cgroup").oom_kills() == 0
