"""simrun-worker and run_worker in this process: units, reports, failures, exit codes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from harness import worker
from harness.config import TaskPaths
from harness.errors import Terminated, UnitError
from harness.examples.csv_stats import TASK_TYPE as CSV_STATS
from harness.examples.squares import TASK_TYPE as SQUARES
from harness.examples.squares import SquaresSettings
from harness.ledger import Ledger
from harness.memory import GIB
from harness.merge import MERGED_MARKER
from harness.report import units_done
from harness.tasktypes import TaskType
from tests.harness.task_dirs import claims, make_task, progress_units, report_of
from tests.polling import wait_for


def squares_paths(store: Path, n: int, **settings: object) -> tuple[TaskPaths, SquaresSettings]:
    task_dir = make_task(store, "squares", {"n": n, **settings})
    return TaskPaths(task_dir=task_dir, store=store), SquaresSettings(n=n, **settings)


def run(paths: TaskPaths, settings: SquaresSettings, name: str = "sweep-w1", **kw: object):
    options = {"cores": 2, "memory_bytes": None, "base_gb": 0.1, "per_worker_gb": 0.1, **kw}
    return worker.run_worker(SQUARES, settings, paths, name, **options)  # type: ignore[arg-type]


def test_a_worker_computes_every_unit_and_reports_them(store: Path) -> None:
    paths, settings = squares_paths(store, 500)

    report = run(paths, settings, attempt=2)

    assert report.units_done == list(range(500))
    assert sorted(progress_units(paths.task_dir)) == list(range(500))
    assert units_done(paths.task_dir) == 500
    assert claims(paths.task_dir) == []
    assert Ledger.read(paths.ledger).results() == [i * i for i in range(500)]
    written = report_of(paths.task_dir, "sweep-w1", attempt=2)
    assert written == report
    assert written.processes == 2 and written.per_worker_gb == 0.1 and not written.failed
    assert written.completed is True
    assert written.unit_seconds > 0 and written.cpu_seconds > 0 and written.seconds > 0
    assert written.peak_memory_bytes and written.peak_memory_bytes > 0
    assert (paths.ledger / "heartbeats" / "sweep-w1").exists()


def test_the_pool_has_no_more_processes_than_the_memory_allows(store: Path) -> None:
    paths, settings = squares_paths(store, 10)

    report = run(paths, settings, cores=4, memory_bytes=int(0.35 * GIB))

    assert report.processes == 2  # (0.35 - 0.1) / 0.1
    assert report.memory_limit_bytes == int(0.35 * GIB)


def test_a_pool_never_has_more_processes_than_units(store: Path) -> None:
    paths, settings = squares_paths(store, 1)

    assert run(paths, settings, cores=4).processes == 1


def test_a_unit_that_raises_is_released_and_the_report_says_failed(store: Path) -> None:
    paths, settings = squares_paths(store, 40, fail_unit=7)

    with pytest.raises(UnitError) as raised:
        run(paths, settings)

    assert raised.value.index == 7
    # The message carries the exception of the unit: it becomes the task's message.
    assert str(raised.value) == (
        "unit 7 failed: RuntimeError: unit 7 fails as its settings ask (fail_unit)"
    )
    report = report_of(paths.task_dir, "sweep-w1")
    assert report.failed and 7 not in report.units_done and report.completed is False
    assert claims(paths.task_dir) == []
    ledger = Ledger.read(paths.ledger)
    ledger.refresh()
    assert any(7 in r for r in ledger.missing())


def test_a_worker_stopped_before_its_first_claim_claims_nothing(store: Path) -> None:
    paths, settings = squares_paths(store, 20)
    stop = threading.Event()
    stop.set()

    with pytest.raises(Terminated):
        run(paths, settings, stop=stop)

    stopped = report_of(paths.task_dir, "sweep-w1")
    assert stopped.units_done == [] and stopped.completed is False
    assert claims(paths.task_dir) == [] and progress_units(paths.task_dir) == []


def test_a_ledger_of_another_size_is_an_error(store: Path) -> None:
    paths, settings = squares_paths(store, 20)
    Ledger.open(paths.ledger, 30, "sweep-w9")

    with pytest.raises(ValueError, match="30 units"):
        run(paths, settings)


def test_a_memory_too_small_for_one_process_is_an_error_with_a_report(store: Path) -> None:
    paths, settings = squares_paths(store, 5)

    with pytest.raises(ValueError, match="fit no process"):
        run(paths, settings, memory_bytes=int(0.15 * GIB))

    report = report_of(paths.task_dir, "sweep-w1")
    assert report.units_done == [] and report.processes == 0 and not report.failed
    assert report.memory_limit_bytes == int(0.15 * GIB)


def test_an_invalid_worker_id_is_an_error_without_a_report(store: Path) -> None:
    paths, settings = squares_paths(store, 5)

    with pytest.raises(ValueError, match="worker id"):
        run(paths, settings, name="bad/id")

    assert not (paths.task_dir / "workers").exists()


def test_a_plugin_type_is_not_run_by_the_worker(store: Path) -> None:
    paths, _ = squares_paths(store, 5)

    with pytest.raises(ValueError, match="not splittable"):
        worker.run_worker(
            CSV_STATS,
            CSV_STATS.parse_settings({}),
            paths,
            "w",
            cores=1,
            memory_bytes=None,
            base_gb=0.1,
            per_worker_gb=0.1,
        )


# -- main in this process ----------------------------------------------------------------


def test_the_coordinator_that_merges_writes_the_outputs_and_the_marker_last(
    store: Path, harness_env
) -> None:
    task_dir = make_task(store, "squares", {"n": 200}, coordinator_merges=True)
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_ATTEMPT="1")

    assert worker.main([]) == 0

    out = task_dir / "out"
    assert json.loads((out / "squares.json").read_text()) == [i * i for i in range(200)]
    assert (out / "squares.csv").read_text().splitlines()[:2] == ["unit,square", "0,0"]
    marker = out / MERGED_MARKER
    assert marker.exists()
    assert all(marker.stat().st_mtime_ns >= f.stat().st_mtime_ns for f in out.iterdir())
    assert report_of(task_dir, "sweep-w0", attempt=1).units_done == list(range(200))


def test_a_coordinator_whose_plan_does_not_merge_leaves_the_merge_to_simrun_merge(
    store: Path, harness_env
) -> None:
    task_dir = make_task(store, "squares", {"n": 5})
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base")

    assert worker.main([]) == 0
    assert not (task_dir / "out" / MERGED_MARKER).exists()


def test_an_extra_worker_runs_under_its_worker_id(store: Path, harness_env) -> None:
    task_dir = make_task(store, "squares", {"n": 5})
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_WORKER="sweep-w3")

    assert worker.main([]) == 0
    assert report_of(task_dir, "sweep-w3").units_done == [0, 1, 2, 3, 4]


def test_a_unit_that_raises_exits_3(store: Path, harness_env) -> None:
    task_dir = make_task(store, "squares", {"n": 10, "fail_unit": 3})
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base")

    assert worker.main([]) == 3
    assert report_of(task_dir, "sweep-w0").failed


@pytest.mark.parametrize(
    ("type_", "raw", "env", "message"),
    [
        ("nonesuch", {}, {}, "unknown task type 'nonesuch'"),
        ("squares", {"n": 0}, {}, "settings of task type 'squares': n:"),
        ("csv-stats", {}, {}, "not splittable"),
        ("squares", {"n": 3}, {"SIMRUN_ROLE": "extra"}, "SIMRUN_WORKER is not set"),
        ("squares", {"n": 3}, {"SIMRUN_ROLE": "leader"}, "SIMRUN_ROLE='leader'"),
        ("squares", {"n": 3}, {"SIMRUN_CORES": "0"}, "SIMRUN_CORES='0'"),
        ("squares", {"n": 3}, {"SIMRUN_MEMORY_SOURCE": "swap"}, "SIMRUN_MEMORY_SOURCE='swap'"),
        ("squares", {"n": 3}, {"SIMRUN_MEMORY_LIMIT_GB": "0.1"}, "fit no process"),
        ("squares", {"n": 3}, {"SIMRUN_INPUTS": "table"}, "'table' is not port=path"),
    ],
)
def test_a_configuration_error_exits_4_with_a_message_naming_it(
    store: Path, harness_env, caplog, type_: str, raw: dict, env: dict, message: str
) -> None:
    task_dir = make_task(store, type_, raw)
    harness_env(SIMRUN_TASK_DIR=str(task_dir), **{"SIMRUN_ROLE": "base", **env})

    assert worker.main([]) == 4
    assert message in caplog.text


def test_a_memory_too_small_exits_4_with_a_report(store: Path, harness_env, caplog) -> None:
    task_dir = make_task(store, "squares", {"n": 3})
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_MEMORY_LIMIT_GB="0.1")

    assert worker.main([]) == 4
    assert "fit no process" in caplog.text
    assert report_of(task_dir, "sweep-w0").memory_limit_bytes == int(0.1 * GIB)


def test_a_worker_without_a_task_directory_exits_4(harness_env, caplog) -> None:
    harness_env()

    assert worker.main([]) == 4
    assert "SIMRUN_TASK_DIR is not set" in caplog.text


def test_short_units_are_claimed_many_at_a_time(store: Path) -> None:
    paths, settings = squares_paths(store, 4000)  # a block per unit, units of microseconds

    run(paths, settings)

    pieces = [n for n in os.listdir(paths.ledger / "done") if not n.startswith(".")]
    assert len(pieces) < 100  # a piece per batch, not per unit


def test_run_worker_handles_sigterm_itself_when_no_caller_does(store: Path) -> None:
    paths, settings = squares_paths(store, 20, delay_s=0.2)

    def terminate_after_the_first_unit() -> None:
        deadline = time.monotonic() + 30
        while not progress_units(paths.task_dir) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=terminate_after_the_first_unit)
    sender.start()
    try:
        with pytest.raises(Terminated):
            run(paths, settings)
    finally:
        sender.join()
    assert 0 < len(report_of(paths.task_dir, "sweep-w1").units_done) < 20
    assert claims(paths.task_dir) == []


class SetupSettings(SquaresSettings):
    marks: str


def _setup(settings: SetupSettings) -> int:
    """Mark the setup of this pool process: one file per call, named by its pid."""
    mark = Path(settings.marks) / f"{os.getpid()}-{time.monotonic_ns()}"
    mark.write_text("")
    return os.getpid()


def _compute(settings: SetupSettings, context: int, index: int) -> tuple[int, int]:
    return context, os.getpid()


WITH_SETUP = TaskType(
    name="with-setup",
    settings=SetupSettings,
    units=lambda settings: settings.n,
    compute=_compute,
    merge=SQUARES.merge,
    setup=_setup,
)


def test_the_setup_runs_once_in_each_pool_process_and_its_result_reaches_every_unit(
    store: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    task_dir = make_task(store, "squares", {"n": 300})
    settings = SetupSettings(n=300, marks=str(marks))
    options = {"cores": 2, "memory_bytes": None, "base_gb": 0.1, "per_worker_gb": 0.1}

    worker.run_worker(WITH_SETUP, settings, TaskPaths(task_dir, store), "sweep-w1", **options)  # type: ignore[arg-type]

    setups = [mark.name.split("-")[0] for mark in marks.iterdir()]
    results = Ledger.read(TaskPaths(task_dir, store).ledger).results()
    assert len(results) == 300
    computing = {pid for _context, pid in results}
    assert all(context == pid for context, pid in results), "each unit got its process's setup"
    assert sorted(setups) == sorted(str(pid) for pid in computing), "one setup per process"


class GatedSettings(SquaresSettings):
    gate: str
    """A file: the unit ``gated`` waits until it exists."""
    gated: int


def _gated(settings: GatedSettings, context: None, index: int) -> int:
    while index == settings.gated and not Path(settings.gate).exists():
        time.sleep(0.01)
    return index * index


GATED = TaskType(
    name="gated",
    settings=GatedSettings,
    units=lambda settings: settings.n,
    compute=_gated,
    merge=SQUARES.merge,
)


def test_units_finished_before_a_long_one_are_stored_while_it_runs(
    store: Path, tmp_path: Path
) -> None:
    """A pool process stores what it finished within ``FLUSH_S`` of its end, even while the
    next unit of its batch runs for long: a kill then loses only that unit, and the service
    shows the others. Before, they waited for the long unit's end (a cancelled sweep's table
    missed a unit finished seconds before)."""
    gate = tmp_path / "gate"
    task_dir = make_task(store, "squares", {"n": 40})
    settings = GatedSettings(n=40, gate=str(gate), gated=5)
    options = {"cores": 1, "memory_bytes": None, "base_gb": 0.1, "per_worker_gb": 0.1}
    seen: list[list[int]] = []

    def open_the_gate_once_stored() -> None:
        """The first batch is unit 0 alone; the next, of short units, holds 1 to 5 at least:
        wait until 1 to 4 are stored, note what was, and let unit 5 end."""
        with contextlib.suppress(AssertionError):  # what was stored by then is asserted below
            wait_for(lambda: {1, 2, 3, 4} <= set(progress_units(task_dir)), 60, interval_s=0.02)
        seen.append(progress_units(task_dir))
        gate.touch()

    watcher = threading.Thread(target=open_the_gate_once_stored)
    watcher.start()
    try:
        report = worker.run_worker(
            GATED, settings, TaskPaths(task_dir, store), "sweep-w1", **options
        )  # type: ignore[arg-type]
    finally:
        gate.touch()
        watcher.join()
    assert {1, 2, 3, 4} <= set(seen[0]) and 5 not in seen[0], seen[0]
    assert report.units_done == list(range(40))
