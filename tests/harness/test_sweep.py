"""Command sweeps as the harness runs them: one real program per unit, its placeholders, its
failures, its results table; and the table of a task type whose units return mappings."""

from __future__ import annotations

import json
import os
import pickle
import signal
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness import worker
from harness.config import TaskPaths, paths_from_env
from harness.errors import Terminated, UnitError
from harness.examples.ising import TASK_TYPE as ISING
from harness.examples.ising import IsingSettings
from harness.grid import parse_sweep
from harness.ledger import Ledger
from harness.memory import descendants
from harness.merge import merge_exit, run_merge
from harness.pieces import ORIGINS, store_pieces
from harness.sweep import TASK_TYPE as SWEEP
from harness.sweep import FailuresExceeded, SweepSettings
from tests.harness.processes import clean_environ, finish, spawn
from tests.harness.task_dirs import claims, make_task, progress_units, report_of
from tests.polling import wait_for

RESULT = 'printf \'{{"energy": %s, "label": "%s"}}\' "$(( $1 * 10 + $2 ))" "T$1" > "$3/result.json"'
"""A program of the sweeps below: writes a flat JSON object into its {out}."""


def settings_of(command: list[str], sweep: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A sweep's settings as the service stores them (``runs.planning.spec.sweep_settings``)."""
    raw = {"command": command, "sweep": parse_sweep(sweep).as_json(), **fields}
    return SweepSettings.model_validate(raw).model_dump(mode="json")


@pytest.fixture
def sweep(
    store: Path, tmp_path: Path, harness_env: Callable[..., None]
) -> Callable[..., tuple[TaskPaths, SweepSettings]]:
    """A sweep task in the store, with the environment its pool processes read."""

    def make(
        command: list[str], axes: dict[str, Any], task: str = "sim", **fields: Any
    ) -> tuple[TaskPaths, Any]:
        inputs = fields.pop("inputs", {})
        raw = settings_of(command, axes, ports=sorted(inputs), **fields)
        task_dir = make_task(store, "sweep", raw, task=task)
        harness_env(
            SIMRUN_TASK_DIR=str(task_dir),
            SIMRUN_SCRATCH=str(tmp_path / "scratch"),
            SIMRUN_INPUTS=",".join(f"{port}={path}" for port, path in inputs.items()),
        )
        return paths_from_env(os.environ), SWEEP.parse_settings(raw)

    return make


def run(paths: TaskPaths, settings: Any, task_type: Any = SWEEP, **options: Any) -> Any:
    """The coordinator alone, as a split task runs on one machine."""
    defaults = {"cores": 2, "memory_bytes": None, "base_gb": 0.1, "per_worker_gb": 0.1}
    return worker.run_worker(
        task_type, settings, paths, "sim-w0", coordinator=True, **{**defaults, **options}
    )


def table(paths: TaskPaths) -> pd.DataFrame:
    return pd.read_csv(paths.out / "results.csv")


def parquet_of(paths: TaskPaths) -> pd.DataFrame | None:
    """The table's Parquet, which the merge writes beside its CSV where pyarrow is installed,
    and only there (None)."""
    path = paths.out / "results.parquet"
    if find_spec("pyarrow") is None:
        assert not path.exists()
        return None
    return pd.read_parquet(path)


def test_a_sweep_runs_its_program_once_per_combination_and_tables_what_each_wrote(sweep):
    paths, settings = sweep(
        ["sh", "-c", RESULT, "sh", "{T}", "{seed}", "{out}"],
        {"T": [1, 2, 3], "seed": {"range": [0, 4]}},
        results="result.json",
    )

    report = run(paths, settings)
    run_merge(SWEEP, settings, paths)

    assert report.units_done == list(range(12))
    assert sorted(progress_units(paths.task_dir)) == list(range(12))
    found = table(paths)
    assert list(found.columns) == [
        "unit",
        "T",
        "seed",
        "exit_code",
        "seconds",
        "peak_gib",
        "energy",
        "label",
    ]
    assert found["unit"].tolist() == list(range(12))
    assert list(zip(found["T"], found["seed"], strict=True)) == [
        (t, s) for t in (1, 2, 3) for s in range(4)
    ]
    assert found["energy"].tolist() == [t * 10 + s for t in (1, 2, 3) for s in range(4)]
    assert found["label"].tolist() == [f"T{t}" for t in (1, 2, 3) for _ in range(4)]
    assert (found["exit_code"] == 0).all()
    assert found["seconds"].between(0, 60).all() and (found["peak_gib"] > 0).all()
    for column in ("unit", "T", "seed", "exit_code", "energy"):
        assert pd.api.types.is_integer_dtype(found[column]), column
    assert pd.api.types.is_float_dtype(found["seconds"])
    parquet = parquet_of(paths)
    if parquet is not None:
        assert list(parquet.columns) == list(found.columns)
        assert parquet["energy"].tolist() == found["energy"].tolist()
    assert json.loads((paths.out / "units/5/result.json").read_text()) == {
        "energy": 21,
        "label": "T2",
    }
    assert claims(paths.task_dir) == []


def test_units_and_columns_follow_the_axes_of_the_spec_through_a_store_sorting_keys(
    store, tmp_path, harness_env
):
    """The settings of a sweep written ``T``, ``h``, ``a`` (its ``axes``, as the service's
    ``sweep_settings`` gives them: tests/service/test_spec_sweep.py), stored as ``write_json``
    stores them (keys sorted: ``T``, ``a``, ``h``), run in the order written: unit 1 is
    ``a``'s second value, and the table's parameter columns are ``T``, ``h``, ``a``."""
    program = 'printf \'{{"v": "%s%s%s"}}\' "$1" "$2" "$3" > "$4/r.json"'
    command = ["sh", "-c", program, "sh", "{T}", "{h}", "{a}", "{out}"]
    axes = {"T": [1, 2], "h": [3, 4, 5], "a": ["x", "y"]}
    written = settings_of(command, axes, results="r.json")
    stored = json.loads(json.dumps(written, sort_keys=True))
    task_dir = make_task(store, "sweep", stored, task="sim")
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_SCRATCH=str(tmp_path / "scratch"))
    paths, settings = paths_from_env(os.environ), SWEEP.parse_settings(stored)

    run(paths, settings)
    run_merge(SWEEP, settings, paths)

    found = table(paths)
    assert list(found.columns)[:4] == ["unit", "T", "h", "a"]
    assert found["v"].tolist() == [f"{t}{h}{a}" for t in (1, 2) for h in (3, 4, 5) for a in "xy"]


CPUS = (
    'printf \'{{"cpus": "%s"}}\' '
    '"$(awk \'/^Cpus_allowed_list/ {{print $2}}\' /proc/self/status)" > "$1/result.json"'
)
"""A program of the sweeps below: writes the CPUs it may run on (``0-1``, ``1``) into its {out}."""


def cpu_set(listed: str) -> set[int]:
    """The CPUs of a list as the kernel writes it: ``0-2,5``."""
    cpus: set[int] = set()
    for part in listed.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


@pytest.mark.parametrize("one_per_cpu", [True, False])
def test_a_pool_of_one_process_per_cpu_binds_each_and_its_programs_to_one(sweep, one_per_cpu):
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("one CPU: a pool of one process per CPU and a smaller one are the same")
    paths, settings = sweep(
        ["sh", "-c", CPUS, "sh", "{out}"], {"n": {"range": [0, 12]}}, results="result.json"
    )

    report = run(paths, settings, cores=len(allowed) if one_per_cpu else len(allowed) - 1)
    run_merge(SWEEP, settings, paths)

    assert report.processes == (len(allowed) if one_per_cpu else len(allowed) - 1)
    seen = [cpu_set(str(listed)) for listed in table(paths)["cpus"]]
    assert len(seen) == 12
    if one_per_cpu:
        assert all(len(cpus) == 1 and cpus <= allowed for cpus in seen), seen
    else:
        assert all(cpus == allowed for cpus in seen), seen
    assert os.sched_getaffinity(0) == allowed  # the worker itself is not bound


def test_placeholders_are_filled_in_every_position_of_the_command(sweep, tmp_path):
    table_dir = tmp_path / "table"
    table_dir.mkdir()
    script = (
        'printf "%s\\n" "$0" "$@" "$SIMRUN_UNIT" "$SIMRUN_OUT" "$PWD" "$(ls -A)" > "$3/args"; '
        "touch left-behind"
    )
    paths, settings = sweep(
        [
            "{shell}",
            "-c",
            script,
            "{shell}",
            "{T}",
            "--t={T}/{k}",
            "{out}",
            "{out}/f-{unit}.txt",
            "{inputs.table}",
            "{{T}}",
            "a}}b",
            "{k}",
        ],
        {"shell": ["sh", "dash"], "T": [0.5, 1e-05], "k": ["x y"]},
        inputs={"table": table_dir},
    )

    run(paths, settings)
    run_merge(SWEEP, settings, paths)

    work = paths.scratch / "work"
    for unit, (shell, t) in enumerate([(s, t) for s in ("sh", "dash") for t in ("0.5", "1e-05")]):
        out = str(paths.out / "units" / str(unit))
        lines = (paths.out / "units" / str(unit) / "args").read_text().split("\n")
        assert lines[:11] == [
            shell,
            t,
            f"--t={t}/x y",
            out,
            f"{out}/f-{unit}.txt",
            str(table_dir),
            "{T}",
            "a}b",
            "x y",
            str(unit),
            out,
        ]
        assert Path(lines[11]).parent == work  # the pool process's working directory
        assert lines[12] == ""  # empty, whatever the unit before left in it
    assert table(paths)["shell"].tolist() == ["sh", "sh", "dash", "dash"]


def test_a_unit_that_exits_non_zero_fails_the_task_as_a_failing_unit_does(sweep):
    script = '[ "$1" != 6 ] || {{ echo "diverged at step 12" >&2; exit 3; }}'
    paths, settings = sweep(["sh", "-c", script, "sh", "{i}"], {"i": {"range": [0, 10]}})

    with pytest.raises(UnitError) as raised:
        run(paths, settings, cores=1)

    assert raised.value.index == 6
    assert "sh exited 3: diverged at step 12" in str(raised.value)
    report = report_of(paths.task_dir, "sim-w0")
    assert report.failed and 6 not in report.units_done
    assert claims(paths.task_dir) == []
    assert merge_exit(SWEEP, settings, paths) == 3  # unit 6 is not done


def test_failed_units_within_the_allowance_are_recorded_with_their_exit_and_stderr(sweep):
    script = 'if [ $(( $1 % 4 )) = 1 ]; then echo "no convergence" >&2; exit 2; fi; echo ok'
    paths, settings = sweep(
        ["sh", "-c", script, "sh", "{i}"], {"i": {"range": [0, 8]}}, failures={"allowed": "25%"}
    )

    report = run(paths, settings)
    run_merge(SWEEP, settings, paths)

    assert report.units_done == list(range(8)) and not report.failed
    found = table(paths)
    assert found["exit_code"].tolist() == [0, 2, 0, 0, 0, 2, 0, 0]
    failed = "no convergence"
    assert found["error"].fillna("").tolist() == ["", failed, "", "", "", failed, "", ""]
    assert (paths.out / "units/0/stdout").read_text() == "ok\n"
    assert not (paths.out / "units/0/stderr").exists()  # an empty output is not kept
    assert (paths.out / "units/1/stderr").read_text() == "no convergence\n"


def test_a_failed_unit_says_its_exception_and_parameters_in_its_row_and_progress_line(sweep):
    """The error cell is the traceback's last line (the exception), not its first; the unit's
    progress line says it failed, with its parameters; every unit's row is kept as it ends."""
    script = "import sys\nif sys.argv[1] == '2': raise ValueError('bad ' + sys.argv[2])"
    paths, settings = sweep(
        ["python", "-c", script, "{i}", "{T}"],
        {"i": {"range": [0, 4]}, "T": [0.5]},
        failures={"allowed": 1},
    )

    run(paths, settings)
    run_merge(SWEEP, settings, paths)

    assert table(paths)["error"].fillna("").tolist() == ["", "", "ValueError: bad 0.5", ""]
    lines = [json.loads(line) for line in paths.progress.read_text().splitlines()]
    assert [line.get("failed") for line in sorted(lines, key=lambda line: line["unit"])] == [
        None,
        None,
        "unit 2 (i=2, T=0.5): ValueError: bad 0.5",
        None,
    ]
    rows = [json.loads(line) for line in (paths.task_dir / "rows.jsonl").read_text().splitlines()]
    by_unit = {row["unit"]: row["row"] for row in rows}
    assert sorted(by_unit) == [0, 1, 2, 3]
    assert by_unit[2]["error"] == "ValueError: bad 0.5" and by_unit[2]["T"] == 0.5
    assert "error" not in by_unit[0] and by_unit[0]["exit_code"] == 0


def test_more_failures_than_allowed_fail_the_task_in_the_worker_or_else_in_the_merge(sweep):
    command = ["sh", "-c", 'echo "bad $1" >&2; [ $(( $1 % 2 )) = 0 ]', "sh", "{i}"]
    paths, settings = sweep(command, {"i": {"range": [0, 6]}}, failures={"allowed": 2})

    with pytest.raises(UnitError) as raised:
        run(paths, settings, cores=1)  # the third failure of the process

    assert raised.value.index == 5
    assert str(raised.value) == (
        "unit 5 failed: with i=5, sh exited 1: bad 5 (more than the 2 failures allowed)"
    )  # its parameters, not the harness's exception class

    paths, settings = sweep(command, {"i": {"range": [0, 6]}}, "sim2", failures={"allowed": 3})
    run(paths, settings)
    stricter = SWEEP.parse_settings(
        {**settings.model_dump(mode="json"), "failures": {"allowed": 2}}
    )
    with pytest.raises(FailuresExceeded, match=r"3 of 6 units failed, 2 allowed .*units 1, 3, 5"):
        run_merge(SWEEP, stricter, paths)
    assert not (paths.out / ".simrun-merged").exists()
    assert table(paths)["exit_code"].tolist() == [0, 1, 0, 1, 0, 1]


def test_a_results_file_may_be_a_one_row_csv_and_a_bad_one_fails_its_unit(sweep):
    write = (
        'printf "x,name,empty\\n%s.5,n%s,\\n" "$1" "$1" > "$2/r.csv"; '
        '[ "$1" != 2 ] || : > "$2/r.csv"'
    )
    paths, settings = sweep(
        ["sh", "-c", write, "sh", "{i}", "{out}"],
        {"i": [0, 1, 2]},
        results="r.csv",
        failures={"allowed": 1},
    )

    run(paths, settings)
    run_merge(SWEEP, settings, paths)

    found = table(paths)
    assert found["x"].tolist()[:2] == [0.5, 1.5] and found["name"].tolist()[:2] == ["n0", "n1"]
    assert found["error"][2] == "its r.csv is not a CSV of a header and one row"
    assert found["exit_code"][2] == 0


def test_a_results_file_that_is_missing_or_not_flat_fails_its_unit(sweep):
    write = '[ "$1" = 0 ] || printf \'{{"a": [1]}}\' > "$2/r.json"'
    paths, settings = sweep(
        ["sh", "-c", write, "sh", "{i}", "{out}"], {"i": [0, 1]}, results="r.json"
    )

    with pytest.raises(UnitError) as raised:
        run(paths, settings, cores=1)

    assert raised.value.index == 0 and "sh exited 0 but it wrote no r.json" in str(raised.value)
    paths, settings = sweep(
        ["sh", "-c", write, "sh", "{i}", "{out}"],
        {"i": [0, 1]},
        "sim2",
        results="r.json",
        failures={"allowed": 2},
    )
    run(paths, settings)
    run_merge(SWEEP, settings, paths)
    assert table(paths)["error"].tolist() == [
        "it wrote no r.json",
        "its r.json is not a flat JSON object of names and values",
    ]


def test_a_results_file_larger_than_its_cap_fails_its_unit(sweep):
    write = 'head -c 9000 /dev/zero | tr "\\0" x | sed "s/.*/{{\\"a\\": \\"&\\"}}/" > "$1/r.json"'
    paths, settings = sweep(["sh", "-c", write, "sh", "{out}"], {"i": [0]}, results="r.json")

    with pytest.raises(UnitError) as raised:
        run(paths, settings, cores=1)

    assert "its r.json is larger than 8192 bytes" in str(raised.value)


def test_a_program_killed_by_sigkill_kills_its_pool_process_after_it_stored_its_units(sweep):
    paths, settings = sweep(
        ["sh", "-c", '[ "$1" != 7 ] || kill -9 $$', "sh", "{i}"], {"i": {"range": [0, 12]}}
    )

    with pytest.raises(BrokenProcessPool):
        run(paths, settings, cores=1)  # 137: retried, with the retry memory after an OOM kill

    report = report_of(paths.task_dir, "sim-w0")
    assert report.units_done == list(range(7))
    assert sorted(progress_units(paths.task_dir)) == list(range(7))
    assert claims(paths.task_dir) == []


def _pid_of(marker: Path) -> int:
    wait_for(lambda: marker.exists() and marker.read_text().strip(), what=str(marker))
    return int(marker.read_text())


def test_a_program_ended_by_the_sigterm_of_an_eviction_is_neither_stored_nor_failed(
    sweep, tmp_path
):
    marker = tmp_path / "started"
    script = f'[ "$1" != 3 ] || {{{{ echo $$ > {marker}; exec sleep 60; }}}}'
    paths, settings = sweep(["sh", "-c", script, "sh", "{i}"], {"i": {"range": [0, 6]}})
    stop = threading.Event()
    ended: list[BaseException] = []

    def work() -> None:
        try:
            run(paths, settings, cores=1, stop=stop)
        except BaseException as error:
            ended.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    pid = _pid_of(marker)
    stop.set()  # as the local backend does: the worker and every process of its tree
    os.kill(pid, signal.SIGTERM)
    thread.join(60)

    assert [type(e) for e in ended] == [Terminated]
    report = report_of(paths.task_dir, "sim-w0")
    assert report.units_done == [0, 1, 2] and not report.failed
    assert claims(paths.task_dir) == []


def test_a_program_ended_by_a_sigterm_of_its_own_fails_its_unit(sweep):
    paths, settings = sweep(["sh", "-c", '[ "$1" != 1 ] || kill $$', "sh", "{i}"], {"i": [0, 1]})

    with pytest.raises(UnitError) as raised:
        run(paths, settings, cores=1)

    assert raised.value.index == 1 and "sh exited -15" in str(raised.value)


def test_a_unit_past_its_time_limit_is_killed_with_its_program(sweep, tmp_path):
    marker = tmp_path / "started"
    script = f'[ "$1" != 1 ] || {{{{ echo $$ > {marker}; exec sleep 60; }}}}'
    paths, settings = sweep(["sh", "-c", script, "sh", "{i}"], {"i": [0, 1, 2]})

    with pytest.raises(UnitError) as raised:
        run(paths, settings, cores=1, unit_time_limit_s=1.0)

    assert raised.value.index == 1 and "time limit" in str(raised.value)
    pid = int(marker.read_text())
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), what=f"the program {pid} to be gone")


def test_the_memory_of_a_unit_is_its_programs_peak_and_counts_into_the_report(sweep):
    # Short-lived, so the tree's samples (every 0.2 s) may well miss it.
    grab = "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"
    paths, settings = sweep(["python", "-S", "-c", grab, "{i}"], {"i": [0]})

    report = run(paths, settings, cores=1, memory_source="process")
    run_merge(SWEEP, settings, paths)

    assert table(paths)["peak_gib"][0] > 0.29
    assert report.peak_memory_bytes > 300 * 2**20


def test_the_table_of_a_resumed_sweep_says_which_rows_were_reused_and_from_where(sweep):
    command = ["sh", "-c", RESULT, "sh", "{T}", "0", "{out}"]
    earlier, settings = sweep(command, {"T": {"range": [0, 6]}}, results="result.json")
    run(earlier, settings)
    computed = Ledger.read(earlier.task_dir / "units").results()
    paths, _ = sweep(command, {"T": {"range": [0, 6]}}, results="result.json", task="again")
    reused = paths.task_dir / "units" / "reused"
    reused.mkdir(parents=True)
    payloads = [pickle.dumps(result) for result in computed]
    store_pieces(reused, [0, 1], payloads[0:2])
    store_pieces(reused, [4], payloads[4:5])
    (reused / ORIGINS).write_text(json.dumps({"0-2": "r0/sim", "4-5": "r9/sim"}))

    report = run(paths, settings)
    run_merge(SWEEP, settings, paths)

    assert report.units_done == [2, 3, 5]
    found = table(paths)
    assert list(found.columns)[-1] == "reused_from"
    assert found["reused_from"].fillna("").tolist() == ["r0/sim", "r0/sim", "", "", "r9/sim", ""]
    assert found["energy"].tolist() == [t * 10 for t in range(6)]
    # A table of a sweep that reused nothing has no such column.
    run_merge(SWEEP, settings, earlier)
    assert "reused_from" not in table(earlier).columns


def test_ising_gets_the_results_table_of_its_mappings(store, tmp_path):
    settings = IsingSettings(size=4, points=3, sweeps=10)
    task_dir = make_task(store, "ising", settings.model_dump(), task="ising")
    paths = TaskPaths(task_dir=task_dir, store=store, scratch=tmp_path)

    run(paths, settings, task_type=ISING)
    run_merge(ISING, settings, paths)

    found = table(paths)
    assert list(found.columns) == [
        "unit",
        "temperature",
        "energy",
        "magnetization",
        "specific_heat",
        "susceptibility",
    ]
    assert found["unit"].tolist() == [0, 1, 2]
    assert found["temperature"].tolist() == [1.5, 2.5, 3.5]
    ising_csv = pd.read_csv(paths.out / "ising.csv")
    assert found["energy"].tolist() == ising_csv["energy"].tolist()
    parquet = parquet_of(paths)
    assert parquet is None or parquet["temperature"].tolist() == [1.5, 2.5, 3.5]


def test_a_type_whose_units_return_no_mappings_gets_no_table(store, tmp_path):
    from harness.examples.squares import TASK_TYPE as SQUARES
    from harness.examples.squares import SquaresSettings

    settings = SquaresSettings(n=3)
    task_dir = make_task(store, "squares", {"n": 3})
    paths = TaskPaths(task_dir=task_dir, store=store, scratch=tmp_path)

    run(paths, settings, task_type=SQUARES)
    run_merge(SQUARES, settings, paths)

    assert not (paths.out / "results.csv").exists()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a worker's pool, not the programs below it)."""
    found = []
    for below in descendants(pid):
        try:
            stat = Path(f"/proc/{below}/stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(below)
    return found


def test_a_pool_process_killed_mid_sweep_loses_no_unit_and_stores_none_twice(store, tmp_path, logs):
    ran = tmp_path / "ran"
    command = ["sh", "-c", f'sleep 0.02; echo "$1" >> {ran}', "sh", "{i}"]
    raw = settings_of(command, {"i": {"range": [0, 120]}})
    task_dir = make_task(store, "sweep", raw, task="sim", coordinator_merges=True)
    env = clean_environ(
        SIMRUN_TASK_DIR=str(task_dir),
        SIMRUN_SCRATCH=str(tmp_path / "scratch"),
        SIMRUN_ROLE="base",
        SIMRUN_CORES="2",
        SIMRUN_MEMORY_SOURCE="process",
    )
    first = spawn("worker", env, logs / "w0.log")
    pool = wait_for(lambda: len(_children(first.pid)) == 2 and _children(first.pid), 30)
    wait_for(lambda: len(progress_units(task_dir)) >= 10, 60, "ten units stored")

    os.kill(pool[0], signal.SIGKILL)

    assert finish(first, logs / "w0.log") == 137
    done_before = report_of(task_dir, "sim-w0", 0).units_done
    assert done_before and len(done_before) < 120
    again = spawn("worker", {**env, "SIMRUN_ATTEMPT": "1"}, logs / "w0.log")
    assert finish(again, logs / "w0.log") == 0, (logs / "w0.log").read_text()

    found = pd.read_csv(task_dir / "out/results.csv")
    assert found["unit"].tolist() == list(range(120)) and found["i"].tolist() == list(range(120))
    stored = progress_units(task_dir)
    assert len(stored) == len(set(stored))  # no unit stored twice
    assert set(report_of(task_dir, "sim-w0", 1).units_done).isdisjoint(done_before)
    assert {int(line) for line in ran.read_text().split()} == set(range(120))  # none lost
