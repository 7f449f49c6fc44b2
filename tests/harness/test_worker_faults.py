"""Faults of a worker lose no finished unit: units that exit, hang, cannot be sent back or
stored, pool processes and workers killed, a store that fails."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from harness import worker
from harness.config import TaskPaths
from harness.errors import StorageError, UnitError
from harness.examples.squares import TASK_TYPE as SQUARES
from harness.examples.squares import SquaresSettings
from harness.ledger import Ledger
from harness.memory import descendants
from harness.tasktypes import TaskType
from tests.harness.processes import clean_environ, finish, spawn
from tests.harness.task_dirs import claims, make_task, progress_units, report_of
from tests.polling import wait_for


class FaultSettings(SquaresSettings):
    fault: str = ""
    at: int = 0


def _faulty(settings: FaultSettings, context: None, index: int) -> object:
    """Square the index; unit ``at`` exits, hangs or returns what cannot be pickled."""
    if index == settings.at:
        if settings.fault == "exit":
            sys.exit(0)  # a command line's main() called from a unit
        if settings.fault == "hang":
            time.sleep(600)
        if settings.fault == "unpicklable":
            return lambda: index
    return index * index


FAULTY = TaskType(
    name="faulty",
    settings=FaultSettings,
    units=lambda settings: settings.n,
    compute=_faulty,
    merge=SQUARES.merge,
)


def _run_faulty(store: Path, **kw: object) -> tuple[TaskPaths, FaultSettings]:
    settings = FaultSettings(**{"n": 40, **kw})  # type: ignore[arg-type]
    task_dir = make_task(store, "squares", {"n": settings.n})
    paths = TaskPaths(task_dir=task_dir, store=store)
    return paths, settings


def _worker(paths: TaskPaths, settings: FaultSettings, **kw: object):
    options = {"cores": 2, "memory_bytes": None, "base_gb": 0.1, "per_worker_gb": 0.1, **kw}
    return worker.run_worker(FAULTY, settings, paths, "sweep-w1", **options)  # type: ignore[arg-type]


def _stored(paths: TaskPaths) -> list[int]:
    ledger = Ledger.read(paths.ledger)
    ledger.refresh()
    return ledger.covered([range(ledger.size)])


def test_a_unit_that_calls_sys_exit_fails_and_is_released(store: Path) -> None:
    paths, settings = _run_faulty(store, fault="exit", at=5)

    with pytest.raises(UnitError) as raised:
        _worker(paths, settings)

    assert raised.value.index == 5 and "SystemExit: 0" in str(raised.value)
    report = report_of(paths.task_dir, "sweep-w1")
    assert report.failed and 5 not in report.units_done
    assert claims(paths.task_dir) == []
    assert sorted(progress_units(paths.task_dir)) == report.units_done == _stored(paths)


def test_a_result_that_cannot_be_pickled_blames_its_own_unit(store: Path) -> None:
    paths, settings = _run_faulty(store, fault="unpicklable", at=25)

    with pytest.raises(UnitError) as raised:
        _worker(paths, settings, cores=1)

    assert raised.value.index == 25
    assert 25 not in _stored(paths) and claims(paths.task_dir) == []


def test_a_unit_past_its_time_limit_is_killed_and_fails(store: Path) -> None:
    paths, settings = _run_faulty(store, fault="hang", at=3, n=12)

    began = time.monotonic()
    with pytest.raises(UnitError) as raised:
        _worker(paths, settings, unit_time_limit_s=0.5, grace_s=5)

    assert time.monotonic() - began < 60  # not the unit's 600 s
    assert raised.value.index == 3
    assert str(raised.value) == "unit 3 failed: it ran longer than its time limit of 0.5 s"
    assert claims(paths.task_dir) == []
    report = report_of(paths.task_dir, "sweep-w1")
    assert report.failed and 3 not in report.units_done
    assert report.units_done == _stored(paths)  # the other process's units are kept


def test_the_time_limit_comes_from_the_environment(store: Path, harness_env, caplog) -> None:
    task_dir = make_task(store, "squares", {"n": 2, "delay_s": 600})
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_UNIT_TIME_LIMIT_S="0.3")

    assert worker.main([]) == 3
    assert "time limit of 0.3 s" in caplog.text
    assert claims(task_dir) == []


def test_a_time_limit_that_is_no_number_is_a_configuration_error(
    store: Path, harness_env, caplog
) -> None:
    task_dir = make_task(store, "squares", {"n": 2})
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_UNIT_TIME_LIMIT_S="soon")

    assert worker.main([]) == 4
    assert "SIMRUN_UNIT_TIME_LIMIT_S='soon'" in caplog.text


# -- the store fails ---------------------------------------------------------------------


def test_a_full_disk_under_the_progress_exits_75_with_the_claims_released(
    store: Path, harness_env, caplog
) -> None:
    task_dir = make_task(store, "squares", {"n": 50})
    (task_dir / "progress.jsonl").symlink_to("/dev/full")  # every write: ENOSPC
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base")

    assert worker.main([]) == 75

    assert "No space left on device" in caplog.text
    assert claims(task_dir) == []
    report = report_of(task_dir, "sweep-w0")
    assert not report.failed and report.units_done == []


def test_a_claim_that_is_a_directory_exits_75_with_the_report_written(
    store: Path, harness_env, caplog
) -> None:
    task_dir = make_task(store, "squares", {"n": 6})
    Ledger.open(task_dir / "units", 6, "sweep-w9")
    (task_dir / "units" / "claims" / "0").mkdir()  # no claim any worker makes
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_STALE_S="0.4")

    assert worker.main([]) == 75

    assert "Is a directory" in caplog.text
    assert claims(task_dir) == ["0"]  # only the directory: this worker's claims released
    assert report_of(task_dir, "sweep-w0").units_done == list(range(1, 6))


def test_run_worker_raises_a_storage_error_not_an_oserror(store: Path) -> None:
    paths, settings = _run_faulty(store)
    (paths.task_dir / "progress.jsonl").symlink_to("/dev/full")

    with pytest.raises(StorageError, match="No space left on device"):
        _worker(paths, settings)


# -- processes killed ----------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie no longer does)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def _sweep(store: Path, logs: Path, n: int = 200, delay_s: float = 0.05, run: str = "r1", **env):
    task_dir = make_task(store, "squares", {"n": n, "delay_s": delay_s}, run=run)
    environ = clean_environ(
        SIMRUN_TASK_DIR=str(task_dir), SIMRUN_WORKER="sweep-w1", SIMRUN_CORES="2", **env
    )
    process = spawn("worker", environ, logs / "w1.log")
    pool = wait_for(lambda: len(descendants(process.pid)) == 2 and descendants(process.pid), 30)
    assert len(pool) == 2
    wait_for(lambda: progress_units(task_dir), 30, "a unit stored")
    return task_dir, process, pool


def test_a_pool_process_killed_loses_no_unit_either_process_finished(
    store: Path, logs: Path
) -> None:
    task_dir, process, pool = _sweep(store, logs)
    before = len(progress_units(task_dir))

    os.kill(pool[0], signal.SIGKILL)

    assert finish(process, logs / "w1.log") == 137
    stored = progress_units(task_dir)
    assert len(stored) >= before
    report = report_of(task_dir, "sweep-w1")
    paths = TaskPaths(task_dir=task_dir, store=store)
    # The ledger is the record: a process killed between its piece and its progress line
    # leaves a unit done that progress does not show yet.
    assert report.units_done == _stored(paths)
    assert set(stored) <= set(report.units_done)
    assert claims(task_dir) == []


def test_a_pool_broken_when_the_next_batch_is_sent_keeps_its_units_and_releases_its_claims(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    paths, settings = _run_faulty(store, n=400, delay_s=0.01)
    submit, sent = ProcessPoolExecutor.submit, []

    def killed_before_the_third(executor, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        # A process dies after storing units; the pool knows it is broken before any answer
        # tells the worker, whose next batch finds it so.
        sent.append(fn)
        if len(sent) == 3:
            wait_for(lambda: progress_units(paths.task_dir), 30, "a unit stored")
            os.kill(next(iter(executor._processes)), signal.SIGKILL)
            wait_for(lambda: executor._broken, 30, "the pool to know it is broken")
        return submit(executor, fn, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", killed_before_the_third)

    with pytest.raises(BrokenProcessPool):
        _worker(paths, settings)

    report = report_of(paths.task_dir, "sweep-w1")
    assert report.units_done and report.units_done == _stored(paths)
    assert claims(paths.task_dir) == []


@pytest.mark.slow
def test_a_pool_process_killed_mid_unit_fifty_times_never_hangs_the_worker(
    store: Path, logs: Path
) -> None:
    # A grace far beyond finish()'s 60 s: a worker that waited for a process stuck on a queue
    # lock its killed sibling held would be caught here, not excused by the grace.
    for round_ in range(50):
        task_dir, process, pool = _sweep(
            store, logs, n=400, delay_s=0.02, run=f"r{round_}", SIMRUN_GRACE_S="600"
        )
        os.kill(pool[round_ % 2], signal.SIGKILL)

        assert finish(process, logs / "w1.log") == 137, f"round {round_}"
        report = report_of(task_dir, "sweep-w1")
        assert report.units_done == _stored(TaskPaths(task_dir=task_dir, store=store))
        assert claims(task_dir) == [], f"round {round_}"


def test_a_worker_killed_keeps_the_units_its_processes_stored_and_takes_them_along(
    store: Path, logs: Path
) -> None:
    task_dir, process, pool = _sweep(store, logs)

    os.kill(process.pid, signal.SIGKILL)
    process.wait()

    # The pool processes die with their worker instead of computing on as orphans.
    wait_for(lambda: not any(_alive(pid) for pid in pool), 10, "the pool to die")
    stored = progress_units(task_dir)
    assert stored and sorted(stored) == _stored(TaskPaths(task_dir=task_dir, store=store))
