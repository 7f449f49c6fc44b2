"""A sweep's page and runs compared, in real Chromium against Django's live server: the page
opens on the results with its failed units counted, a filter and an average over the seeds
redraw the plot with error bars and its link restores the view; two runs ticked in the list
compare as one table and one overlaid plot."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from runs.models import Task
from tests.browser.test_results import log_in
from tests.dashboard.test_results_page import csv_text, out_dir
from tests.dashboard.test_sweep_page import SEEDS, seeded_rows
from tests.factories import ended, submitted

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SWEEP = """
name: {name}
tasks:
  sweep: {{type: squares, settings: {{n: 6}}}}
"""


def sweep_run(owner, store, name: str, shift: float = 0):
    run = ended(submitted(owner, SWEEP.format(name=name)))
    rows = [[*row[:-1], row[-1] + shift] for row in seeded_rows()]
    out = out_dir(store, run)
    (out / "results.csv").write_text(csv_text(SEEDS, rows))
    for unit in range(12):
        (out / "units" / str(unit)).mkdir(parents=True)
        (out / "units" / str(unit) / "result.json").write_text('{"energy": 1}')
    return run


def test_the_sweep_page_opens_on_its_results_and_a_view_is_a_link(
    page: Page, live_server, owner, store, shoot
):
    run = sweep_run(owner, store, "ising")
    Task.objects.filter(run=run).update(
        units_failed=2, unit_failure="unit 4 (T=1.0, seed=0): ValueError: bad"
    )
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{run.id}/")

    section = page.locator("#results-sweep")
    expect(section.locator("svg.results-chart")).to_have_attribute("data-y", "energy")
    workflow = page.locator("h2", has_text="Workflow")
    assert section.bounding_box()["y"] < workflow.bounding_box()["y"]
    expect(page.locator("[data-units-failed-notice]")).to_contain_text(
        "2 of 6 units of sweep failed (allowed by failures.allowed); the first: unit 4 "
        "(T=1.0, seed=0): ValueError: bad"
    )
    folded = page.locator("[data-unit-outputs]")
    expect(folded).not_to_have_attribute("open", "")
    assert folded.locator("li").first.text_content().strip().startswith("units/0/")

    view = section.locator("form[data-view-form]")
    view.locator('input[name="filter"]').fill("T >= 1")
    view.locator('select[name="over"]').select_option("seed")
    view.locator("button[type=submit]").click()
    chart = section.locator("svg.results-chart")
    expect(chart).to_have_attribute("data-y", "energy mean")
    expect(chart.locator("line[data-spread]")).to_have_count(2)
    expect(section.locator("tbody tr")).to_have_count(2)
    section.locator('form.plot-form select[name="y"]').select_option("energy max")
    expect(chart).to_have_attribute("data-y", "energy max")
    shoot("sweep-results-first")

    section.locator("a[data-view-link]").click()
    restored = page.locator("#results-sweep")
    expect(restored.locator("svg.results-chart")).to_have_attribute("data-y", "energy max")
    expect(restored.locator('form[data-view-form] input[name="filter"]')).to_have_value("T >= 1")
    expect(restored.locator("tbody tr")).to_have_count(2)


def test_two_runs_ticked_in_the_list_compare_as_one_table_and_one_plot(
    page: Page, live_server, owner, store, shoot
):
    first, second = sweep_run(owner, store, "cold"), sweep_run(owner, store, "hot", shift=5)
    log_in(page, live_server, owner)

    for run in (first, second):
        page.locator(f'tr[data-run="{run.id}"] input[type=checkbox]').check()
    page.locator("[data-compare-selected]").click()

    chart = page.locator("svg.results-chart")
    expect(chart).to_have_attribute("data-colour", "run")
    expect(chart).to_have_attribute("data-series-count", "2")
    expect(page.locator("table.results tbody tr")).to_have_count(12)
    runs = page.locator("table.results tbody tr td:first-child").all_inner_texts()
    assert runs == [second.id] * 6 + [first.id] * 6  # in the order the list shows them
    page.locator('select[name="over"]').select_option("seed")
    page.locator("[data-compare-form] button[type=submit]").click()
    expect(page.locator("table.results tbody tr")).to_have_count(6)
    expect(chart.locator("line[data-spread]")).to_have_count(6)
    shoot("compare-runs")
