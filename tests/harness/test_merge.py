"""simrun-merge: the merge once the ledger is complete, its marker, its exit codes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from harness import merge
from harness.config import TaskPaths
from harness.examples.squares import TASK_TYPE as SQUARES
from harness.ledger import Ledger
from harness.merge import MERGED_MARKER, merge_exit, run_merge
from harness.tasktypes import MergeContext, TaskType
from tests.harness.task_dirs import make_task


def _ledger(task_dir: Path, n: int, done: list[int]) -> None:
    ledger = Ledger.open(task_dir / "units", n, "sweep-w0")
    ledger.write_piece(done, [u * u for u in done])


def test_the_merge_of_a_complete_ledger_writes_the_outputs_then_the_marker(
    store: Path, harness_env
) -> None:
    task_dir = make_task(store, "squares", {"n": 4})
    _ledger(task_dir, 4, [0, 1, 2, 3])
    harness_env(SIMRUN_TASK_DIR=str(task_dir))

    assert merge.main([]) == 0

    assert json.loads((task_dir / "out" / "squares.json").read_text()) == [0, 1, 4, 9]
    assert json.loads((task_dir / "out" / MERGED_MARKER).read_text())["units"] == 4


def test_an_incomplete_ledger_exits_3_naming_the_units_and_writes_no_marker(
    store: Path, harness_env, caplog
) -> None:
    task_dir = make_task(store, "squares", {"n": 6})
    _ledger(task_dir, 6, [0, 1, 4])
    harness_env(SIMRUN_TASK_DIR=str(task_dir))

    assert merge.main([]) == 3

    assert "units not done: 2-3, 5" in caplog.text
    assert not (task_dir / "out" / MERGED_MARKER).exists()


def test_a_merge_before_any_worker_exits_3(store: Path, harness_env, caplog) -> None:
    harness_env(SIMRUN_TASK_DIR=str(make_task(store, "squares", {"n": 2})))

    assert merge.main([]) == 3
    assert "no worker has started" in caplog.text


@pytest.mark.parametrize(
    ("type_", "raw", "message"),
    [("csv-stats", {}, "not splittable"), ("squares", {"n": -1}, "n:"), ("nope", {}, "'nope'")],
)
def test_a_configuration_error_exits_4(
    store: Path, harness_env, caplog, type_: str, raw: dict, message: str
) -> None:
    harness_env(SIMRUN_TASK_DIR=str(make_task(store, type_, raw)))

    assert merge.main([]) == 4
    assert message in caplog.text


def test_a_ledger_of_another_size_is_no_merge(store: Path) -> None:
    task_dir = make_task(store, "squares", {"n": 3})
    _ledger(task_dir, 5, [0, 1, 2, 3, 4])

    with pytest.raises(ValueError, match="has 5 units, the task 3"):
        run_merge(SQUARES, SQUARES.parse_settings({"n": 3}), TaskPaths(task_dir, store))


def _broken_merge(settings: object, context: MergeContext) -> None:
    (context.out / "half.txt").write_text("half")
    raise OSError("disk full")


def test_a_merge_that_fails_again_leaves_no_marker_of_the_merge_before(store: Path) -> None:
    task_dir = make_task(store, "squares", {"n": 2})
    _ledger(task_dir, 2, [0, 1])
    paths = TaskPaths(task_dir, store)
    settings = SQUARES.parse_settings({"n": 2})
    run_merge(SQUARES, settings, paths)
    assert (paths.out / MERGED_MARKER).exists()
    broken = TaskType(
        name="broken",
        settings=SQUARES.settings,
        units=SQUARES.units,
        compute=SQUARES.compute,
        merge=_broken_merge,
    )

    assert merge_exit(broken, settings, paths) == 3

    assert not (paths.out / MERGED_MARKER).exists()


def _pieces(task_dir: Path) -> list[str]:
    return sorted((task_dir / "units" / "done").iterdir())  # type: ignore[arg-type]


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "empty"])
def test_a_damaged_piece_is_set_aside_and_its_units_computed_again(
    store: Path, harness_env, caplog, damage: str
) -> None:
    task_dir = make_task(store, "squares", {"n": 6})
    ledger = Ledger.open(task_dir / "units", 6, "sweep-w0")
    ledger.write_piece([0, 1, 2], [0, 1, 4])
    ledger.write_piece([3, 4, 5], [9, 16, 25])
    piece = task_dir / "units" / "done" / "3-6"
    data = piece.read_bytes()
    damaged = {
        "truncate": data[: len(data) // 2],
        "flip a byte": data[:-1] + bytes([data[-1] ^ 0xFF]),
        "empty": b"",
    }[damage]
    piece.write_bytes(damaged)
    harness_env(SIMRUN_TASK_DIR=str(task_dir))

    assert merge.main([]) == 0  # not failing on every try

    assert json.loads((task_dir / "out" / "squares.json").read_text()) == [0, 1, 4, 9, 16, 25]
    assert "damaged pieces done/3-6: units 3-5 not done" in caplog.text
    assert (task_dir / "units" / "done" / ".3-6.damaged").read_bytes() == damaged
    assert Ledger.read(task_dir / "units").results() == [0, 1, 4, 9, 16, 25]


def test_a_damaged_piece_whose_units_other_pieces_hold_is_only_set_aside(
    tmp_path: Path,
) -> None:
    ledger = Ledger.open(tmp_path, 4, "sweep-w0")
    ledger.write_piece([0, 1], [0, 1])
    ledger.write_piece([2, 3], [4, 9])
    (tmp_path / "done" / "0-4").write_bytes(b"SIMRUNP1")  # computed twice, then damaged

    assert Ledger.read(tmp_path).results() == [0, 1, 4, 9]
    assert (tmp_path / "done" / ".0-4.damaged").exists()


def test_a_piece_of_a_harness_before_checksums_is_read(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path, 3, "sweep-w0")
    (tmp_path / "done" / "0-3").write_bytes(pickle.dumps([0, 1, 4]))

    assert ledger.results() == [0, 1, 4]


def test_a_full_disk_under_the_outputs_exits_75_without_a_marker(
    store: Path, harness_env, caplog
) -> None:
    task_dir = make_task(store, "squares", {"n": 2})
    _ledger(task_dir, 2, [0, 1])
    (task_dir / "out").mkdir()
    (task_dir / "out" / "squares.json").symlink_to("/dev/full")
    harness_env(SIMRUN_TASK_DIR=str(task_dir))

    assert merge.main([]) == 75

    assert "No space left on device" in caplog.text
    assert not (task_dir / "out" / MERGED_MARKER).exists()


def _leaving_merge(code: object) -> object:
    def merge_then_leave(settings: object, context: MergeContext) -> None:
        (context.out / "half.txt").write_text("half")
        raise SystemExit(code)

    return merge_then_leave


@pytest.mark.parametrize("code", [None, 0, 3, "bye"])
def test_a_merge_that_calls_sys_exit_is_a_failed_merge_without_its_marker(
    store: Path, code: object
) -> None:
    task_dir = make_task(store, "squares", {"n": 2})
    _ledger(task_dir, 2, [0, 1])
    paths = TaskPaths(task_dir, store)
    leaving = TaskType(
        name="leaving",
        settings=SQUARES.settings,
        units=SQUARES.units,
        compute=SQUARES.compute,
        merge=_leaving_merge(code),  # type: ignore[arg-type]
    )

    assert merge_exit(leaving, SQUARES.parse_settings({"n": 2}), paths) == 3

    assert not (paths.out / MERGED_MARKER).exists()
