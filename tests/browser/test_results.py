"""A task's results table and its plot in real Chromium against Django's live server: the
table loads into the run page and sorts, the plot redraws as x, y, colour and kind are chosen,
a heat map, the download, and a sorted table that stays sorted across the page's live refreshes."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from runs.models import Run, Task, TaskState
from tests.dashboard.test_results_page import HEADER, SWEEP, csv_text, grid_rows, out_dir
from tests.factories import ended, running, submitted

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "results-password"
TWO_TASKS = """
name: grid-then-more
tasks:
  sweep: {type: squares, settings: {n: 6}}
  more: {type: squares, settings: {n: 10}}
"""


def log_in(page: Page, live_server, owner) -> None:
    owner.set_password(PASSWORD)
    owner.save()
    page.goto(live_server.url + "/login/")
    page.fill("#id_username", owner.get_username())
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")


@pytest.fixture
def run(owner, store) -> Run:
    made = ended(submitted(owner, SWEEP))
    (out_dir(store, made) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    return made


def first_column(page: Page) -> list[str]:
    return page.locator("#results-sweep tbody tr td:first-child").all_inner_texts()


def test_the_table_loads_into_the_run_page_and_sorts_by_a_column(
    page: Page, live_server, owner, run, shoot
):
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{run.id}/")
    section = page.locator("#results-sweep")
    expect(section.locator("[data-results-count]")).to_have_text("6 rows")
    headers = section.locator("thead th").all_inner_texts()
    assert [h.strip() for h in headers] == HEADER
    assert first_column(page) == ["0", "1", "2", "3", "4", "5"]
    section.locator('th[data-column="method"] a').click()
    expect(section.locator('th[data-column="method"]')).to_have_attribute("aria-sort", "ascending")
    assert first_column(page) == ["1", "3", "5", "0", "2", "4"]
    section.locator('th[data-column="energy"] a').click()
    section.locator('th[data-column="energy"][aria-sort="ascending"] a').click()
    expect(section.locator('th[data-column="energy"]')).to_have_attribute("aria-sort", "descending")
    assert first_column(page) == ["5", "4", "3", "2", "1", "0"]
    shoot("results-table-sorted")


def test_choosing_x_y_and_colour_redraws_the_plot_and_a_heat_map(
    page: Page, live_server, owner, run, shoot
):
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{run.id}/")
    chart = page.locator("#results-sweep svg.results-chart")
    expect(chart).to_have_attribute("data-x", "T")
    expect(chart).to_have_attribute("data-y", "energy")
    expect(chart).to_have_attribute("data-series-count", "2")
    shoot("results-plot-default")
    form = page.locator("#results-sweep form.plot-form")
    form.locator('select[name="colour"]').select_option("method")
    expect(chart).to_have_attribute("data-colour", "method")
    series = chart.locator("g.series[data-series]")
    expect(series).to_have_count(2)
    assert [s.get_attribute("data-series") for s in series.all()] == ["mc", "md"]
    form.locator('select[name="colour"]').select_option("")
    expect(chart).to_have_attribute("data-series-count", "1")
    form.locator('select[name="y"]').select_option("seconds")
    expect(chart).to_have_attribute("data-y", "seconds")
    expect(chart.locator('text[data-axis="y"]')).to_have_text("seconds")
    form.locator('select[name="x"]').select_option("seed")
    expect(chart).to_have_attribute("data-x", "seed")
    expect(chart.locator('text[data-axis="x"]')).to_have_text("seed")
    form.locator('select[name="y"]').select_option("energy")
    form.locator('select[name="x"]').select_option("T")
    form.locator('select[name="colour"]').select_option("seed")
    form.locator('select[name="kind"]').select_option("heatmap")
    expect(chart).to_have_attribute("data-kind", "heatmap")
    expect(chart.locator("rect.cell")).to_have_count(6)
    tip = chart.locator("rect.cell title").first.text_content()
    assert tip is not None and "mean energy" in tip
    shoot("results-heat-map")


def test_the_download_is_the_whole_table(page: Page, live_server, owner, run):
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{run.id}/")
    with page.expect_download() as download:
        page.locator('#results-sweep [data-download="csv"]').click()
    path = download.value.path()
    assert path.read_text() == csv_text(HEADER, grid_rows())
    assert download.value.suggested_filename == f"{run.id}-sweep-results.csv"


def test_a_sorted_table_and_a_chosen_plot_stay_across_live_refreshes(
    page: Page, live_server, owner, store
):
    live = running(submitted(owner, TWO_TASKS), sweep=TaskState.DONE, more=TaskState.RUNNING)
    (out_dir(store, live) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{live.id}/")
    section = page.locator("#results-sweep")
    section.locator('th[data-column="unit"] a').click()
    section.locator('th[data-column="unit"][aria-sort="ascending"] a').click()
    expect(section.locator('th[data-column="unit"]')).to_have_attribute("aria-sort", "descending")
    section.locator('select[name="colour"]').select_option("method")
    expect(section.locator("svg.results-chart")).to_have_attribute("data-colour", "method")
    # The page's live fragment refreshes every 2 s: the next one shows the other task's units.
    Task.objects.filter(run=live, task_id="more").update(units_done=7)
    expect(page.locator('[data-task="more"] .progress-label').first).to_contain_text(
        "7", timeout=15_000
    )
    expect(section.locator('th[data-column="unit"]')).to_have_attribute("aria-sort", "descending")
    assert first_column(page) == ["5", "4", "3", "2", "1", "0"]
    expect(section.locator("svg.results-chart")).to_have_attribute("data-colour", "method")


def test_the_section_fits_a_phones_width(page: Page, live_server, owner, run):
    log_in(page, live_server, owner)
    page.set_viewport_size({"width": 420, "height": 860})
    page.goto(f"{live_server.url}/runs/{run.id}/")
    expect(page.locator("#results-sweep svg.results-chart")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 420, width
    box = page.locator("#results-sweep svg.results-chart").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 420
