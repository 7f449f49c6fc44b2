"""simrun-worker as real processes: parallel workers, SIGTERM, SIGKILL, restarts."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from harness import merge, worker
from harness.merge import MERGED_MARKER
from tests.harness.processes import block_sigterm, clean_environ, finish, spawn
from tests.harness.task_dirs import claims, make_task, progress_units, report_of
from tests.polling import wait_for


def squares_out(task_dir: Path) -> list[int]:
    return json.loads((task_dir / "out" / "squares.json").read_text())


def test_a_coordinator_and_two_extra_workers_share_one_ledger(
    store: Path, logs: Path, harness_env
) -> None:
    n = 300
    task_dir = make_task(store, "squares", {"n": n, "delay_s": 0.01})
    common = {"SIMRUN_TASK_DIR": str(task_dir), "SIMRUN_CORES": "1"}
    processes = {
        name: spawn("worker", clean_environ(**common, **extra), logs / f"{name}.log")
        for name, extra in {
            "sweep-w0": {"SIMRUN_ROLE": "base"},
            "sweep-w1": {"SIMRUN_WORKER": "sweep-w1"},
            "sweep-w2": {"SIMRUN_WORKER": "sweep-w2", "SIMRUN_ROLE": "extra"},
        }.items()
    }

    codes = {name: finish(p, logs / f"{name}.log") for name, p in processes.items()}

    assert codes == dict.fromkeys(processes, 0)
    reports = {name: report_of(task_dir, name) for name in processes}
    done = [u for r in reports.values() for u in r.units_done]
    assert sorted(set(done)) == list(range(n))
    assert sorted(set(progress_units(task_dir))) == list(range(n))
    assert claims(task_dir) == []
    harness_env(SIMRUN_TASK_DIR=str(task_dir))
    assert merge.main([]) == 0
    assert squares_out(task_dir) == [i * i for i in range(n)]


def test_a_worker_stopped_by_sigterm_mid_unit_loses_nothing_when_restarted(
    store: Path, logs: Path, harness_env
) -> None:
    n = 12
    task_dir = make_task(store, "squares", {"n": n, "delay_s": 0.4}, coordinator_merges=True)
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_CORES="2")
    first = spawn("worker", env, logs / "w0-0.log")
    wait_for(lambda: len(progress_units(task_dir)) >= 2, 30, "two units done")

    os.kill(first.pid, signal.SIGTERM)

    assert finish(first, logs / "w0-0.log") == 143
    stopped = report_of(task_dir, "sweep-w0", attempt=0)
    assert not stopped.failed and 0 < len(stopped.units_done) < n
    assert sorted(progress_units(task_dir)) == stopped.units_done  # units in flight finished
    assert claims(task_dir) == []
    assert not (task_dir / "out" / MERGED_MARKER).exists()

    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_ATTEMPT="1")
    assert worker.main([]) == 0

    again = report_of(task_dir, "sweep-w0", attempt=1)
    assert sorted(stopped.units_done + again.units_done) == list(range(n))
    assert squares_out(task_dir) == [i * i for i in range(n)]


def test_units_that_outlast_the_grace_period_are_killed_and_released(
    store: Path, logs: Path
) -> None:
    task_dir = make_task(store, "squares", {"n": 4, "delay_s": 60})
    env = clean_environ(
        SIMRUN_TASK_DIR=str(task_dir), SIMRUN_WORKER="sweep-w1", SIMRUN_GRACE_S="0.5"
    )
    process = spawn("worker", env, logs / "w1.log")
    wait_for(lambda: len(claims(task_dir)) == 2, 30, "two claims")
    time.sleep(0.3)  # let the units start: a stop before they run is another case

    os.kill(process.pid, signal.SIGTERM)

    assert finish(process, logs / "w1.log", timeout=20) == 143
    assert claims(task_dir) == []
    report = report_of(task_dir, "sweep-w1")
    assert report.units_done == [] and not report.failed


def test_a_sigterm_before_the_first_claim_stops_the_worker_with_143(
    store: Path, logs: Path
) -> None:
    task_dir = make_task(store, "squares", {"n": 4})
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base")
    process = spawn("worker", env, logs / "w0.log", preexec_fn=block_sigterm)

    os.kill(process.pid, signal.SIGTERM)  # pending until the harness handles it

    assert finish(process, logs / "w0.log") == 143
    assert progress_units(task_dir) == [] and claims(task_dir) == []
    assert report_of(task_dir, "sweep-w0").units_done == []


def test_a_merge_stopped_before_it_began_exits_143_without_a_marker(
    store: Path, logs: Path, harness_env
) -> None:
    task_dir = make_task(store, "squares", {"n": 3})
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base")
    assert worker.main([]) == 0
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir))
    process = spawn("merge", env, logs / "merge.log", preexec_fn=block_sigterm)

    os.kill(process.pid, signal.SIGTERM)

    assert finish(process, logs / "merge.log") == 143
    assert not (task_dir / "out" / MERGED_MARKER).exists()


def _killed_worker(store: Path, logs: Path) -> tuple[Path, list[str]]:
    """An extra worker SIGKILLed (with its pool) while it holds claims."""
    task_dir = make_task(store, "squares", {"n": 6, "delay_s": 0.5})
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_WORKER="sweep-w1")
    process = spawn("worker", env, logs / "w1.log")
    held = wait_for(lambda: claims(task_dir), 30, "claims of sweep-w1")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return task_dir, held


def test_the_coordinator_reclaims_the_units_of_a_killed_worker_after_stale_s(
    store: Path, logs: Path, harness_env
) -> None:
    task_dir, held = _killed_worker(store, logs)
    assert claims(task_dir)  # the dead worker's claims stay until someone releases them
    harness_env(
        SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_STALE_S="1.5", SIMRUN_CORES="2"
    )

    began = time.monotonic()
    assert worker.main([]) == 0

    assert time.monotonic() - began >= 1.5  # the claims were not taken before stale_s
    report = report_of(task_dir, "sweep-w0")
    assert {int(b) for b in held} <= set(report.units_done)
    assert claims(task_dir) == []
    assert merge.main([]) == 0
    assert squares_out(task_dir) == [i * i for i in range(6)]


def test_a_restarted_worker_releases_the_claims_of_its_killed_incarnation(
    store: Path, logs: Path, harness_env
) -> None:
    task_dir, held = _killed_worker(store, logs)
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_WORKER="sweep-w1", SIMRUN_ATTEMPT="1")

    assert worker.main([]) == 0

    assert {int(b) for b in held} <= set(report_of(task_dir, "sweep-w1", 1).units_done)
    assert claims(task_dir) == []
