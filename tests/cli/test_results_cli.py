"""``simrun results RUN [TASK] [--csv FILE]`` as a user runs it, against a live server."""

from __future__ import annotations

import pytest

from runs.models import Run
from tests.client.test_results import TWO_SWEEPS, shifted_runs
from tests.dashboard.test_results_page import HEADER, SWEEP, csv_text, grid_rows, out_dir
from tests.dashboard.test_sweep_page import cancelled_with_rows, failed_with_rows
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(owner, store) -> Run:
    made = ended(submitted(owner, SWEEP))
    (out_dir(store, made) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    return made


def test_results_prints_the_table_in_aligned_columns_without_a_terminal(simrun, run):
    result = simrun("results", run.id)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == HEADER
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2 + 3].split() == [
        "3",
        "1.0",
        "1",
        "mc",
        "0",
        "0.30000000000000004",
        "0.25",
        "11.0",
    ]
    assert len(lines) == 2 + 6
    # Numbers are right-aligned under their header, text left-aligned.
    energy = lines[0].index("energy") + len("energy")
    assert all(
        line[:energy].endswith(("5.0", "6.0", "10.0", "11.0", "15.0", "16.0")) for line in lines[2:]
    )
    method = lines[0].index("method")
    assert all(line[method : method + 2] in ("md", "mc") for line in lines[2:])


def test_a_wide_table_is_never_wrapped_and_long_cells_are_cut(simrun, owner, store):
    made = ended(submitted(owner, SWEEP))
    header = ["unit", *(f"parameter_{i}" for i in range(20)), "note"]
    row = [0, *range(20), "x" * 500]
    (out_dir(store, made) / "results.csv").write_text(csv_text(header, [row, row]))
    result = simrun("results", made.id, "sweep")
    lines = result.out.splitlines()
    assert result.code == 0 and len(lines) == 4 and len(lines[2]) > 200
    assert lines[2].endswith("x" * 39 + "…")


def test_results_csv_saves_the_whole_table_or_writes_it_to_stdout(simrun, run, tmp_path):
    target = tmp_path / "table.csv"
    saved = simrun("results", run.id, "sweep", "--csv", str(target))
    assert saved.code == 0, saved.err
    assert target.read_text() == csv_text(HEADER, grid_rows())
    assert str(target) in saved.out
    piped = simrun("results", run.id, "--csv", "-")
    assert piped.code == 0 and piped.out == csv_text(HEADER, grid_rows())


def test_results_of_a_run_without_one_or_with_several_exit_2_saying_so(simrun, owner, store):
    bare = ended(submitted(owner, SWEEP))
    none = simrun("results", bare.id)
    assert none.code == 2 and "has no task with a results table" in none.err
    two = ended(submitted(owner, TWO_SWEEPS))
    for task in ("sweep", "other"):
        (out_dir(store, two, task) / "results.csv").write_text("unit,x\n0,1\n")
    several = simrun("results", two.id)
    assert several.code == 2 and "sweep, other: name one" in several.err
    assert "Traceback" not in none.err + several.err
    one = simrun("results", two.id, "other")
    assert one.code == 0 and one.out.splitlines()[0].split() == ["unit", "x"]


def test_results_of_another_users_run_is_not_found(simrun, stranger, store):
    theirs = ended(submitted(stranger, SWEEP))
    (out_dir(store, theirs) / "results.csv").write_text("unit,x\n0,1\n")
    for args in ((theirs.id,), (theirs.id, "sweep")):
        result = simrun("results", *args)
        assert result.code == 2 and "not found" in result.err, args


def test_results_of_several_runs_prints_one_table_with_a_run_column(simrun, owner, store):
    runs = shifted_runs(owner, store)

    shown = simrun("results", *runs, "--filter", "T = 0.5 and seed = 1")
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0].split()[:3] == ["run", "unit", "T"]
    assert [line.split()[0] for line in lines[2:]] == runs
    assert [line.split()[-1] for line in lines[2:]] == ["6.0", "106.0"]
    one = simrun("results", runs[0], "sweep")  # a task of the run: its table, as before
    assert one.code == 0 and one.out.splitlines()[0].split() == HEADER


def test_a_cancelled_sweep_gives_the_rows_of_the_units_it_finished(simrun, owner, store):
    made = cancelled_with_rows(owner, store)

    shown = simrun("results", made.id)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0].split() == ["unit", "T", "exit_code", "seconds", "peak_gib", "energy"]
    assert [line.split()[0] for line in lines[2:]] == ["0", "1"]
    assert shown.err.strip() == (
        f"partial: run {made.id} was cancelled before sweep merged its units; these are the 2 "
        "units it finished"
    )


def test_a_failed_sweep_gives_the_rows_of_the_units_it_finished_said_partial(
    simrun, owner, store, tmp_path
):
    made = failed_with_rows(owner, store)

    shown = simrun("results", made.id)
    assert shown.code == 0, shown.err
    assert [line.split()[0] for line in shown.out.splitlines()[2:]] == ["0", "1", "3"]
    assert shown.err.strip() == (
        f"partial: run {made.id} failed before sweep merged its units; these are the 3 units "
        "it finished"
    )
    saved = simrun("results", made.id, "--csv", "-")
    assert saved.out.splitlines()[0].startswith("unit,T,") and "partial:" in saved.err
    whole = simrun("results", made.id, "sweep")
    assert "partial: run" in whole.err


def test_a_table_of_runs_cut_or_partial_is_said_so_on_stderr(simrun, owner, store, settings):
    runs = [*shifted_runs(owner, store), cancelled_with_rows(owner, store).id]
    settings.SIMRUN_RESULTS_MAX_ROWS = 8

    shown = simrun("results", *runs)
    assert shown.code == 0, shown.err
    assert len(shown.out.splitlines()) == 2 + 8
    assert shown.err.splitlines() == [
        f"note: run {runs[2]}: partial, the units it finished before it ended",
        "note: too large: 14 rows in all, showing the first 8",
    ]
