"""Runs found and compared: two runs' tables as one (a ``run`` column, one plot with a line
per run), runs searched by a parameter's value, by tags and by date, tags and a note set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from tests.dashboard.test_results_page import csv_text, out_dir
from tests.dashboard.test_sweep_page import SEEDS, seeded_rows
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db

SWEEP = """
name: {name}
tasks:
  sim:
    command: [python, -c, "import sys", --temperature, "{{T}}", --seed, "{{seed}}", "{{out}}"]
    sweep: {{T: {axis}, seed: [0, 1]}}
"""


def sweep_run(owner, store: Path, name: str, axis: str = "[0.5, 1.0, 1.5]", shift: float = 0):
    """An ended sweep over T and seed whose table has an energy of 10 T + seed + shift."""
    run = ended(submitted(owner, SWEEP.format(name=name, axis=axis)))
    rows = [[*row[:-1], row[-1] + shift] for row in seeded_rows()]
    (out_dir(store, run, "sim") / "results.csv").write_text(csv_text(SEEDS, rows))
    return run


def test_two_runs_compared_are_one_table_with_a_run_column_and_one_overlaid_plot(
    store: Path, owner, owner_client
):
    first, second = sweep_run(owner, store, "a"), sweep_run(owner, store, "b", shift=100)

    page = owner_client.get("/api/results/", {"runs": f"{first.id},{second.id}"}).json()
    assert [c["name"] for c in page["columns"]][:3] == ["run", "unit", "T"]
    assert page["count"] == 12 and page["runs"] == [first.id, second.id]
    assert [r["run"] for r in page["results"]] == [first.id] * 6 + [second.id] * 6
    averaged = owner_client.get(
        "/api/results/", {"runs": f"{first.id},{second.id}", "over": "seed", "filter": "T = 1"}
    ).json()
    assert [(r["run"], r["energy mean"]) for r in averaged["results"]] == [
        (first.id, 10.5),
        (second.id, 110.5),
    ]
    for bad, field in [({"runs": first.id}, "runs"), ({"runs": f"{first.id},nosuchrun0"}, "runs")]:
        answer = owner_client.get("/api/results/", bad)
        assert answer.status_code == 400 and field in answer.json(), answer.json()

    browser = Client()
    browser.force_login(owner)
    html = browser.get("/runs/compare/", {"runs": f"{first.id},{second.id}"}).content.decode()
    assert 'data-colour="run"' in html and 'data-series-count="2"' in html
    assert html.count("<tr>") == 1 + 12
    # Each run named beside its id: a list of ids alone says nothing of what was compared.
    assert re.findall(r"<span data-compared-name>([^<]*)</span>", html) == ["a", "b"]
    link = re.search(r'data-view-link href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert browser.get("/runs/compare/" + link).status_code == 200
    assert browser.get("/runs/compare/", {"runs": first.id}).status_code == 400


def test_runs_are_found_by_a_parameter_value_by_tags_and_by_date(store: Path, owner, owner_client):
    listed = sweep_run(owner, store, "listed")
    spanned = sweep_run(owner, store, "spanned", axis="{linspace: [2, 4, 3]}")
    other = ended(submitted(owner))

    def found(**query) -> set[str]:
        answer = owner_client.get("/api/runs/", query)
        assert answer.status_code == 200, answer.json()
        return {run["id"] for run in answer.json()["results"]}

    assert found(param="T=1.0") == {listed.id}
    assert found(param="T=3") == {spanned.id}
    assert found(param="T") == {listed.id, spanned.id}
    assert found(param="seed=1") == {listed.id, spanned.id}
    assert found(param="T=7") == set()
    assert other.id not in found(param="T")
    assert owner_client.get("/api/runs/", {"param": "T__gt=1"}).status_code == 400

    labels = owner_client.post(
        f"/api/runs/{spanned.id}/labels/",
        {"tags": ["paper", "ising", "paper"], "note": "the run of figure 3"},
        format="json",
    )
    assert labels.status_code == 200
    assert labels.json() == {"tags": ["paper", "ising"], "note": "the run of figure 3"}
    owner_client.post(f"/api/runs/{listed.id}/labels/", {"tags": ["paper"]}, format="json")
    assert found(tag="paper") == {listed.id, spanned.id}
    assert found(tag=["paper", "ising"]) == {spanned.id}
    detail = owner_client.get(f"/api/runs/{spanned.id}/").json()
    assert (detail["tags"], detail["note"]) == (["paper", "ising"], "the run of figure 3")
    bad = owner_client.post(
        f"/api/runs/{listed.id}/labels/", {"tags": ["two words"]}, format="json"
    )
    assert bad.status_code == 400 and "tags" in bad.json()

    assert found(tag="paper", created_after="2000-01-01") == {listed.id, spanned.id}
    assert found(tag="paper", created_before="2000-01-01") == set()


def test_the_runs_page_finds_by_tag_and_parameter_and_the_run_page_sets_them(store: Path, owner):
    tagged = sweep_run(owner, store, "tagged")
    other = ended(submitted(owner))
    browser = Client()
    browser.force_login(owner)

    saved = browser.post(f"/runs/{tagged.id}/labels/", {"tags": "paper, ising", "note": "fig 3"})
    assert saved.status_code == 302
    page = browser.get(f"/runs/{tagged.id}/").content.decode()
    assert "data-note" in page and "fig 3" in page and page.count("data-tag ") == 2

    empty = {"state": "", "name": "", "tag": "", "param": "", "created_after": "", "live": ""}
    for query, shown, hidden in [
        (empty | {"tag": "paper"}, tagged, other),
        (empty | {"param": "T=0.5"}, tagged, other),
        (empty, tagged, None),
    ]:
        html = browser.get("/", query).content.decode()
        assert "filter_errors" not in html and 'class="notice error"' not in html, html[:3000]
        assert f'data-run="{shown.id}"' in html
        if hidden is not None:
            assert f'data-run="{hidden.id}"' not in html


def test_a_bad_value_of_a_repeated_filter_is_a_400_naming_it_in_sentences(owner_client):
    answer = owner_client.get("/api/runs/", {"tag": ["paper", "x" * 51, "a\x00b"]})
    assert answer.status_code == 400
    errors = answer.json()["tag"]
    assert all(isinstance(message, str) for message in errors), errors
    assert errors[0].startswith("value 2: ") and errors[1].startswith("value 3: ")


def test_a_bad_tag_of_a_runs_labels_is_a_400_naming_it_in_sentences(owner, owner_client, store):
    run = ended(submitted(owner))
    answer = owner_client.post(
        f"/api/runs/{run.id}/labels/", {"tags": ["fine", "two words"]}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json() == {"tags": ["tag 2: a word of 1 to 50 characters"]}


def test_the_run_page_names_a_bad_tag_as_the_api_does(owner, store):
    """The page's notice says which tag is wrong in the API's sentence, never its position."""
    run = ended(submitted(owner))
    page = Client()
    page.force_login(owner)
    answer = page.post(
        f"/runs/{run.id}/labels/", {"tags": "fine two,w" + "x" * 60, "note": ""}, follow=True
    )
    notice = answer.content.decode()
    assert "Not saved: tag 3: a word of 1 to 50 characters" in notice
    run.refresh_from_db()
    assert run.tags == []


def test_a_body_that_does_not_parse_is_a_400_of_the_field_body(owner, owner_client, store):
    run = ended(submitted(owner))
    answer = owner_client.post(
        f"/api/runs/{run.id}/labels/", b"\x00", content_type="application/json"
    )
    assert answer.status_code == 400
    assert list(answer.json()) == ["body"] and "JSON parse error" in answer.json()["body"][0]
