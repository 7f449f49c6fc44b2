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
from runs.models import RunState, Task, TaskState
from tests.dashboard.test_results_page import HEADER, body_rows, csv_text, grid_rows, out_dir
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db

SWEEP = """
name: grid
tasks:
  sweep: {type: squares, settings: {n: 12}}
"""


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


def cancelled_with_rows(owner, store: Path):
    """A cancelled sweep whose units 0 and 1 finished, their rows kept, no merge."""
    made = ended(submitted(owner, SWEEP), RunState.CANCELLED)
    rows = "".join(rows_line(unit, 0.5 * (unit + 1)) for unit in (1, 0))
    (out_dir(store, made).parent / "rows.jsonl").write_text(rows)
    return made


def failed_with_rows(owner, store: Path):
    """A failed sweep (not cancelled): units 0, 1 and 3 finished, their rows kept, unit 2
    failed beyond what the sweep allows, so it never merged."""
    made = ended(submitted(owner, SWEEP), RunState.FAILED, message="sweep failed")
    Task.objects.filter(run=made, task_id="sweep").update(
        state=TaskState.FAILED, message="3 of 12 units failed: unit 2 (T=1.5): ValueError: bad"
    )
    rows = "".join(rows_line(unit, 0.5 * (unit + 1)) for unit in (3, 0, 1))
    (out_dir(store, made).parent / "rows.jsonl").write_text(rows)
    return made


def test_a_failed_sweep_shows_the_table_of_the_units_it_finished_marked_partial(
    store: Path,
    alice,
    owner,
    owner_client,
):
    run = failed_with_rows(owner, store)

    assert 'data-results="sweep"' in page_of(alice, run)
    section = alice.get(f"/runs/{run.id}/tasks/sweep/results/").content.decode()
    partial = section.split("data-results-partial", 1)[1].split("</p>", 1)[0]
    assert "the run failed before sweep merged its units; these are the 3 units it" in partial
    assert [row[0] for row in body_rows(section)] == ["0", "1", "3"]

    page = owner_client.get(f"/api/runs/{run.id}/tasks/sweep/results/").json()
    assert (page["partial"], page["count"]) == (True, 3)
    assert [row["unit"] for row in page["results"]] == [0, 1, 3]
    other = cancelled_with_rows(owner, store)
    compared = owner_client.get("/api/results/", {"runs": f"{run.id},{other.id}"}).json()
    assert compared["count"] == 5
    assert f"run {run.id}: partial, the units it finished before it ended" in compared["notes"]


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
    assert "the run was cancelled before sweep merged its units; these are the 3 units" in section
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


SEEDS = ["unit", "T", "seed", "exit_code", "seconds", "peak_gib", "energy"]


def seeded_rows() -> list[list[object]]:
    """T × seed, an energy of 10 T + seed: each T's mean is 10 T + 0.5, its std √0.5."""
    return [
        [unit, t, seed, 0, 0.1, 0.2, 10 * t + seed]
        for unit, (t, seed) in enumerate((t, s) for t in (0.5, 1.0, 1.5) for s in (0, 1))
    ]


def test_the_api_filters_rows_by_an_expression_and_refuses_one_it_cannot_read(
    store: Path, owner, owner_client
):
    run = ended(submitted(owner, SWEEP))
    (out_dir(store, run) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    url = f"/api/runs/{run.id}/tasks/sweep/results/"

    page = owner_client.get(url, {"filter": "T >= 1 and method = mc"}).json()
    assert [(r["T"], r["method"]) for r in page["results"]] == [(1.0, "mc"), (1.5, "mc")]
    assert owner_client.get(url, {"filter": "`energy` < 5.5"}).json()["count"] == 1
    assert owner_client.get(url, {"filter": "method ~ M"}).json()["count"] == 6

    for bad, says in [
        ("__import__('os').system('true')", "each clause is <column> <op> <value>"),
        ("pressure > 1", "no column 'pressure'"),
        ("T > 1 or seed = 0", "joined by 'and'"),
        ("T > 1 and", "missing after 'and'"),
    ]:
        answer = owner_client.get(url, {"filter": bad})
        assert answer.status_code == 400, bad
        assert says in answer.json()["filter"][0], answer.json()


def test_rows_averaged_over_the_seeds_give_a_mean_and_a_spread_drawn_as_error_bars(
    store: Path, alice, owner, owner_client
):
    run = ended(submitted(owner, SWEEP))
    (out_dir(store, run) / "results.csv").write_text(csv_text(SEEDS, seeded_rows()))

    page = owner_client.get(
        f"/api/runs/{run.id}/tasks/sweep/results/", {"over": "seed", "filter": "T < 1.5"}
    ).json()
    assert [c["name"] for c in page["columns"]][:4] == ["T", "n", "energy mean", "energy std"]
    first = page["results"][0]
    assert (first["T"], first["n"], first["energy mean"]) == (0.5, 2, 5.5)
    assert first["energy std"] == pytest.approx(0.5**0.5)
    assert (first["energy min"], first["energy max"]) == (5.0, 6.0)
    assert page["count"] == 2
    bad = owner_client.get(f"/api/runs/{run.id}/tasks/sweep/results/", {"over": "energy"})
    assert bad.status_code == 400 and "no parameter" in bad.json()["over"][0]

    section = alice.get(f"/runs/{run.id}/tasks/sweep/results/", {"over": "seed"})
    html = section.content.decode()
    assert 'data-y="energy mean"' in html
    assert html.count("data-spread") == 3
    assert "the energy mean at each T" in html and "mean energy mean" not in html
    # The statistics are shown to 7 digits, not as Python's repr; the tooltip has them whole.
    assert '<td class="num" title="0.7071067811865476">0.7071068</td>' in html


def test_a_parameter_of_one_value_is_no_default_colour_the_next_one_is(store: Path, alice, owner):
    run = ended(submitted(owner, SWEEP))
    header = ["unit", "T", "h", "seed", "exit_code", "seconds", "peak_gib", "energy"]
    rows = [[unit, *row[1:2], 0.0, *row[2:]] for unit, row in enumerate(seeded_rows())]
    (out_dir(store, run) / "results.csv").write_text(csv_text(header, rows))

    html = alice.get(f"/runs/{run.id}/tasks/sweep/results/").content.decode()
    assert 'data-colour="seed"' in html and "a line per seed" in html


def test_the_link_of_a_view_restores_its_filter_average_and_plot(store: Path, alice, owner):
    run = ended(submitted(owner, SWEEP))
    (out_dir(store, run) / "results.csv").write_text(csv_text(SEEDS, seeded_rows()))
    asked = {"over": "seed", "filter": "T > 0.5", "x": "T", "y": "energy max", "kind": "lines"}

    section = alice.get(f"/runs/{run.id}/tasks/sweep/results/", asked).content.decode()
    link = re.search(r'data-view-link href="([^"]+)"', section).group(1).replace("&amp;", "&")
    assert link.startswith(f"/runs/{run.id}/?") and link.endswith("#results-sweep")

    page = alice.get(link.split("#")[0]).content.decode()
    placeholder = re.search(r'data-results="sweep"[^>]*hx-get="([^"]+)"', page).group(1)
    restored = alice.get(placeholder.replace("&amp;", "&")).content.decode()
    assert 'data-y="energy max"' in restored and 'data-x="T"' in restored
    assert [row[0] for row in body_rows(restored)] == ["1.0", "1.5"]
    assert 'value="T &gt; 0.5"' in restored
