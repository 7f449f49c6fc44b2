"""A real sweep's page and two real runs compared, in Chromium against ``simrun serve``.

The other browser tests draw tables a test wrote; here the tables are the merge's, of the
relax package of docs/sweeps.md run by the local backend over a grid with seeds, some units
failing (T = 0 divides by zero, allowed by ``failures``). The page must open on those results
with the failures counted, a filter and an average over the seeds must redraw them, its link
must restore the view, and two runs ticked in the list must compare as one table and one
overlaid plot. Screenshots of each step are kept in test-artifacts/ (``real-*.png``).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_scenario import PASSWORD, log_in
from tests.e2e.service import SIMRUN, Service
from tests.e2e.test_shipped_types import run_id, simrun_submit
from tests.e2e.test_sweeps_doc import write_doc_files

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SPEC = """\
name: ising-{name}
tasks:
  relax:
    command: [relax, --temperature, "{{T}}", --field, "{{h}}", --seed, "{{seed}}",
              --out, "{{out}}/result.json"]
    sweep:
      T: {{linspace: [0, 3, 7]}}
      h: [{field}]
      seed: {{range: [0, 3]}}
    results: result.json
    failures: {{allowed: "20%"}}
sources: [./relax-pkg]
"""
UNITS = 21
FAILED = 3
"""The units at T = 0, one per seed: ``math.exp(-cost / 0)``."""


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    started = Service(home=tmp_path_factory.mktemp("real-sweep") / "home")
    started.start()
    yield started
    assert started.stop() == 0


@pytest.fixture(scope="module")
def runs(service: Service, tmp_path_factory) -> tuple[str, str]:
    """Two real sweeps of the relax package, without and with a field, ended."""
    made = subprocess.run(
        [SIMRUN, "user", "alice", "--password", PASSWORD],
        env=service.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    token = made.stdout.split("token: ")[1].split()[0]
    folder = tmp_path_factory.mktemp("relax")
    write_doc_files(folder)
    ids = []
    for name, field in (("cold", 0.0), ("field", 0.5)):
        spec = folder / f"{name}.yaml"
        spec.write_text(SPEC.format(name=name, field=field))
        done = simrun_submit(service, token, spec)
        assert done.returncode == 0, done.stdout + done.stderr
        ids.append(run_id(done.stdout))
        assert re.search(rf"run {ids[-1]} succeeded after", done.stdout), done.stdout
    return ids[0], ids[1]


def test_a_real_sweeps_page_opens_on_its_results_and_its_view_is_a_link(
    page: Page, service: Service, runs: tuple[str, str], shoot
):
    cold, _ = runs
    log_in(page, service)
    page.goto(f"{service.url}/runs/{cold}/")

    section = page.locator("#results-relax")
    chart = section.locator("svg.results-chart")
    expect(chart).to_have_attribute("data-x", "T")
    expect(section.locator("[data-results-count]")).to_have_attribute(
        "data-results-count", str(UNITS)
    )
    workflow = page.locator("h2", has_text="Workflow")
    assert section.bounding_box()["y"] < workflow.bounding_box()["y"]
    expect(page.locator("[data-units-failed-notice]")).to_contain_text(
        f"{FAILED} of {UNITS} units of relax failed"
    )
    expect(page.locator("[data-units-failed-notice]")).to_contain_text("ZeroDivisionError")
    shoot("real-sweep-page")

    view = section.locator("form[data-view-form]")
    view.locator('input[name="filter"]').fill("T > 0")
    view.locator('select[name="over"]').select_option("seed")
    view.locator("button[type=submit]").click()
    expect(chart).to_have_attribute("data-y", re.compile(r" mean$"))
    expect(section.locator("tbody tr")).to_have_count(6)
    expect(chart.locator("line[data-spread]")).to_have_count(6)
    shoot("real-sweep-averaged")

    section.locator("a[data-view-link]").click()
    restored = page.locator("#results-relax")
    expect(restored.locator('form[data-view-form] input[name="filter"]')).to_have_value("T > 0")
    expect(restored.locator("tbody tr")).to_have_count(6)


def test_two_real_runs_compare_as_one_table_and_one_overlaid_plot(
    page: Page, service: Service, runs: tuple[str, str], shoot
):
    log_in(page, service)
    for run in runs:
        page.locator(f'tr[data-run="{run}"] input[type=checkbox]').check()
    page.locator("[data-compare-selected]").click()

    chart = page.locator("svg.results-chart")
    expect(chart).to_have_attribute("data-colour", "run")
    expect(chart).to_have_attribute("data-series-count", "2")
    expect(page.locator("table.results tbody tr")).to_have_count(2 * UNITS)
    shoot("real-compare")

    page.locator('select[name="over"]').select_option("seed")
    page.locator("[data-compare-form] button[type=submit]").click()
    expect(page.locator("table.results tbody tr")).to_have_count(2 * 7)
    shoot("real-compare-averaged")
