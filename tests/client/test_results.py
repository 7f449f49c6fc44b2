"""``Client.results``: a task's results table as a pandas DataFrame, against a live server."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from runs.client import Ambiguous, MissingPandas, NotFound
from runs.models import Run
from tests.dashboard.test_results_page import HEADER, SWEEP, csv_text, grid_rows, out_dir
from tests.dashboard.test_sweep_page import cancelled_with_rows, failed_with_rows
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db(transaction=True)

TWO_SWEEPS = """
name: two
tasks:
  sweep: {type: squares, settings: {n: 6}}
  other: {type: squares, settings: {n: 6}}
"""


@pytest.fixture
def run(owner, store) -> Run:
    made = ended(submitted(owner, SWEEP))
    (out_dir(store, made) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    return made


def test_results_is_the_table_as_a_dataframe_with_its_columns_typed(client, run):
    table = client.run(run.id).results()
    assert list(table.columns) == HEADER and len(table) == 6
    assert table["unit"].tolist() == [0, 1, 2, 3, 4, 5]
    assert table["T"].dtype == "float64" and table["seed"].dtype == "int64"
    assert table["method"].tolist() == ["md", "mc"] * 3
    assert table.groupby("T")["energy"].mean().tolist() == [5.5, 10.5, 15.5]
    pd.testing.assert_frame_equal(client.results(run.id, "sweep"), table)


def test_results_csv_is_the_whole_file_as_text(client, run, settings):
    settings.SIMRUN_RESULTS_MAX_ROWS = 1  # the page's budget; the table is whole
    assert client.results_csv(run.id) == csv_text(HEADER, grid_rows())


def test_a_run_without_a_table_or_with_several_says_so(client, owner, store):
    bare = ended(submitted(owner, SWEEP))
    with pytest.raises(NotFound, match="has no task with a results table"):
        client.results(bare.id)
    with pytest.raises(NotFound, match="task 'sweep' of run .* has no results table"):
        client.results(bare.id, "sweep")
    two = ended(submitted(owner, TWO_SWEEPS))
    for task in ("sweep", "other"):
        (out_dir(store, two, task) / "results.csv").write_text("unit,x\n0,1\n")
    with pytest.raises(Ambiguous, match="results in tasks sweep, other: name one"):
        client.results(two.id)
    assert client.results(two.id, "other")["x"].tolist() == [1]


def test_another_users_results_are_not_found(client, stranger, store):
    theirs = ended(submitted(stranger, SWEEP))
    (out_dir(store, theirs) / "results.csv").write_text("unit,x\n0,1\n")
    with pytest.raises(NotFound):
        client.results(theirs.id, "sweep")
    with pytest.raises(NotFound):
        client.results(theirs.id)


def test_results_without_pandas_says_to_install_it_and_what_needs_nothing(client, run, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(MissingPandas, match=r"pip install pandas.*results_csv\(\)"):
        client.results(run.id)
    assert client.results_csv(run.id).startswith("unit,T,seed")


def shifted_runs(owner, store) -> list[str]:
    """Two runs of the same sweep, the second's energies 100 higher."""
    runs = []
    for shift in (0, 100):
        made = ended(submitted(owner, SWEEP))
        rows = [[*row[:-2], row[-2] + shift, ""] for row in grid_rows()]
        (out_dir(store, made) / "results.csv").write_text(csv_text(HEADER, rows))
        runs.append(made.id)
    return runs


def test_results_of_several_runs_is_one_frame_with_a_run_column_viewed_as_asked(
    client, owner, store
):
    runs = shifted_runs(owner, store)

    table = client.results(runs)
    assert list(table.columns) == ["run", *HEADER] and len(table) == 12
    assert table.groupby("run")["energy"].mean().to_dict() == {runs[0]: 10.5, runs[1]: 110.5}
    averaged = client.results(runs, over="seed", filter="T >= 1")
    assert averaged[["run", "T", "energy mean"]].values.tolist() == [
        [runs[0], 1.0, 10.0],
        [runs[0], 1.0, 11.0],
        [runs[0], 1.5, 15.0],
        [runs[0], 1.5, 16.0],
        [runs[1], 1.0, 110.0],
        [runs[1], 1.0, 111.0],
        [runs[1], 1.5, 115.0],
        [runs[1], 1.5, 116.0],
    ]  # a row per T and method: method is a parameter too, one seed each


def test_results_of_a_cancelled_sweep_are_the_rows_of_the_units_it_finished(client, owner, store):
    table = client.results(cancelled_with_rows(owner, store).id)
    assert table["unit"].tolist() == [0, 1] and table["energy"].tolist() == [5.0, 10.0]
    assert table.attrs["partial"] is True


def test_results_of_a_failed_sweep_are_said_partial_and_a_merged_table_is_not(
    client, owner, store, run
):
    table = client.results(failed_with_rows(owner, store).id)
    assert table["unit"].tolist() == [0, 1, 3] and table.attrs["partial"] is True
    assert client.results(run.id).attrs["partial"] is False


def test_a_frame_of_runs_cut_or_partial_says_so_in_a_warning_and_its_attrs(
    client, owner, store, settings
):
    runs = [*shifted_runs(owner, store), cancelled_with_rows(owner, store).id]
    settings.SIMRUN_RESULTS_MAX_ROWS = 8

    with pytest.warns(UserWarning) as caught:
        table = client.results(runs)
    notes = [
        f"run {runs[2]}: partial, the units it finished before it ended",
        "too large: 14 rows in all, showing the first 8",
    ]
    assert len(table) == 8 and table.attrs["notes"] == notes
    assert [str(warning.message) for warning in caught] == [f"results: {n}" for n in notes]
