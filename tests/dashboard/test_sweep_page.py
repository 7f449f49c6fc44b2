"""A sweep's run page opens on its results: the table before the workflow, the units' folders
folded below in numeric order; a sweep that ended before its merge shows the table of the
units it finished, said to be partial (page and API)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client

from runs.control.failures import FailedAttempt, describe
from runs.models import RunState
from tests.dashboard.test_pages import logged_in
from tests.dashboard.test_results_page import HEADER, body_rows, csv_text, grid_rows, out_dir
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db

SWEEP = """
name: grid
tasks:
  sweep: {type: squares, settings: {n: 12}}
"""


@pytest.fixture
def alice(owner) -> Client:
    return logged_in(owner)


def page_of(client: Client, run) -> str:
    response = client.get(f"/runs/{run.id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_results_come_first_and_the_unit_folders_fold_below_in_numeric_order(
    store: Path,
    alice,
    owner,
):
    run = ended(submitted(owner, SWEEP))
    out = out_dir(store, run)
    (out / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    for unit in (0, 1, 2, 10, 11):
        (out / "units" / str(unit)).mkdir(parents=True)
        (out / "units" / str(unit) / "result.json").write_text("{}")

    html = page_of(alice, run)

    assert html.index('data-results="sweep"') < html.index("<h2>Workflow</h2>")
    folded = html.split("data-unit-outputs", 1)[1].split("</details>", 1)[0]
    units = re.findall(r'href="[^"]*units/(\d+)/result\.json"', folded)
    assert units == ["0", "1", "2", "10", "11"]
    assert html.index("results.csv") < html.index("data-unit-outputs")


def rows_line(unit: int, t: float, error: str | None = None) -> str:
    row = {"unit": unit, "T": t, "exit_code": 1 if error else 0, "seconds": 0.5, "peak_gib": 0.1}
    row |= {"error": error} if error else {"energy": 10 * t}
    return json.dumps({"unit": unit, "row": row}) + "\n"


def test_a_cancelled_sweep_shows_the_table_of_the_units_it_finished_marked_partial(
    store: Path,
    alice,
    owner,
    owner_client,
):
    run = ended(submitted(owner, SWEEP), RunState.CANCELLED)
    task_dir = out_dir(store, run).parent
    (task_dir / "rows.jsonl").write_text(
        rows_line(2, 1.5)
        + rows_line(0, 0.5)
        + rows_line(1, 1.0, "ValueError: bad")
        + rows_line(0, 0.5)  # a unit stored twice: one row
        + '{"unit": 3, "ro'  # a line the cancel cut
    )

    html = page_of(alice, run)
    assert 'data-results="sweep"' in html
    section = alice.get(f"/runs/{run.id}/tasks/sweep/results/").content.decode()
    assert "data-results-partial" in section
    assert "these are the 3 units it finished" in section
    assert [row[0] for row in body_rows(section)] == ["0", "1", "2"]

    page = owner_client.get(f"/api/runs/{run.id}/tasks/sweep/results/").json()
    assert page["partial"] is True and page["count"] == 3
    assert [c["name"] for c in page["columns"]] == [
        "unit", "T", "exit_code", "seconds", "peak_gib", "energy", "error",
    ]  # fmt: skip
    assert page["results"][1]["error"] == "ValueError: bad"
    assert page["results"][2]["energy"] == 15.0


def test_a_failed_attempt_is_described_without_its_log_line_prefix():
    line = "2026-12-06 07:05:55,123 simrun-worker ERROR unit 5 failed: ValueError: bad"
    attempt = FailedAttempt(attempt=0, exit_code=3, message=line)
    assert describe("sweep-w0", attempt).endswith(": unit 5 failed: ValueError: bad")
