"""A scientist's session in a real browser against the real service (``simrun serve``).

Log in, submit the example sweep from the form, watch its progress bars move and the run
succeed without reloading the page, open a task's logs, cancel a second run; a screenshot of
every page is kept in test-artifacts/.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.service import SIMRUN, Service

pytestmark = pytest.mark.slow

PASSWORD = "alice-password"
RUN_TIMEOUT_MS = 240_000
LONG_SWEEP = "sweeps: 3000"
"""The example sweep made long enough to watch its bars move: 24 units of 0.85 s of CPU each
on this machine, about ten seconds on two cores, five of the page's polls at least."""
SLOW_SQUARES = (
    "name: to-cancel\ntasks:\n  sweep: {type: squares, settings: {n: 3000, delay_s: 0.05}}\n"
)


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    started = Service(home=tmp_path_factory.mktemp("browser") / "home")
    started.start()
    subprocess.run(
        [SIMRUN, "user", "alice", "--password", PASSWORD],
        env=started.env(),
        check=True,
        capture_output=True,
    )
    yield started
    assert started.stop() == 0


def log_in(page: Page, service: Service) -> None:
    page.goto(service.url + "/")
    expect(page).to_have_url(re.compile(r"/login/"))
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")


def submit(page: Page, service: Service, *, example: str = "", text: str = "", edit=None) -> str:
    """Submit a spec from the form (an example, edited, or a text); the new run's id."""
    page.goto(service.url + "/runs/new/")
    if example:
        page.click(f"[data-example]:has-text('{example}')")
        text = page.input_value("#spec")
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    page.fill("#spec", text)
    page.click("button:has-text('Submit run')")
    page.wait_for_url(re.compile(r"/runs/[a-z0-9]+/$"))
    return page.url.rstrip("/").rsplit("/", 1)[1]


def progress(page: Page, task: str) -> int:
    value = page.get_attribute(f'#task-{task} [role="progressbar"]', "aria-valuenow")
    return int(value or 0)


def test_a_scientist_submits_watches_reads_logs_and_cancels(page: Page, service: Service, shoot):
    log_in(page, service)
    shoot("01-runs-empty")

    page.goto(service.url + "/runs/new/")
    page.click("[data-example]:has-text('demo.yaml')")
    shoot("02-new-run")
    run_id = submit(page, service, example="demo.yaml", edit=("sweeps: 600", LONG_SWEEP))

    # Watch the page as it is, never reloading it: a marker set now must survive.
    page.evaluate("window.simrunMarker = 'not reloaded'")
    polls: list[str] = []
    page.on(
        "request", lambda request: polls.append(request.url) if "/live/" in request.url else None
    )
    seen: list[int] = []
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    while (state := page.get_attribute("#run-live", "data-state")) != "succeeded":
        assert time.monotonic() < deadline, f"the run did not succeed; progress seen: {seen}"
        assert state in {"submitting", "running"}  # read once: a poll may swap it meanwhile
        seen.append(progress(page, "sweep"))
        if 0 < seen[-1] < 24 and seen.count(seen[-1]) == 1 and len(set(seen)) == 2:
            shoot("03-run-running")
        page.wait_for_timeout(500)
    moving = sorted({v for v in seen if 0 < v < 24})
    assert len(moving) >= 2, f"the sweep's bar did not move between polls: {seen}"
    assert seen == sorted(seen), "progress went backwards"
    assert page.evaluate("window.simrunMarker") == "not reloaded"
    expect(page.locator("#run-live .badge").first).to_have_text("succeeded")
    for task in ("sweep", "stats", "report"):
        expect(page.locator(f'svg.dag [data-task="{task}"]')).to_have_class(
            re.compile("state-done")
        )
    assert progress(page, "sweep") == 24
    expect(page.locator('#task-sweep img[alt="ising.svg"]')).to_be_visible()
    # The fragment answered 286 once the run had ended: htmx stops asking.
    after_end = len(polls)
    page.wait_for_timeout(4500)
    assert len(polls) == after_end, "the page kept polling an ended run"
    shoot("04-run-succeeded")

    page.click("#task-sweep >> text=Logs")
    expect(page.locator("h1")).to_contain_text("Logs of sweep")
    log_text = page.locator("#log .log-text")
    expect(log_text).not_to_be_empty()
    shoot("05-logs")
    first_line = log_text.inner_text().splitlines()[0]
    page.fill("input[name=q]", first_line[:12])
    expect(page.locator("#log .log-status")).to_contain_text("containing")

    cancel_id = submit(page, service, text=SLOW_SQUARES)
    assert cancel_id != run_id
    expect(page.locator("#run-live")).to_have_attribute("data-state", "running", timeout=60_000)
    page.wait_for_function(
        "() => Number(document.querySelector('#task-sweep [role=progressbar]')"
        ".getAttribute('aria-valuenow')) > 0",
        timeout=60_000,
    )
    page.goto(service.url + "/placements/")
    expect(page.locator("#nodes table")).to_contain_text(cancel_id)
    shoot("06-placements")

    page.goto(f"{service.url}/runs/{cancel_id}/tasks/sweep/logs/")
    expect(page.locator("#log .log-status")).to_contain_text("following")
    shoot("07-logs-following")

    page.goto(f"{service.url}/runs/{cancel_id}/")
    page.evaluate("window.simrunMarker = 'not reloaded'")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Cancel run')")
    expect(page.locator("#run-live")).to_have_attribute("data-state", "cancelled")
    expect(page.locator("#run-live")).to_contain_text(f"Run {cancel_id} cancelled.")
    expect(page.locator("button:has-text('Cancel run')")).to_have_count(0)
    assert page.evaluate("window.simrunMarker") == "not reloaded"
    shoot("08-run-cancelled")

    page.goto(service.url + "/")
    rows = page.locator("tr[data-run]")
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr[data-run="{run_id}"] .badge')).to_have_text("succeeded")
    expect(page.locator(f'tr[data-run="{cancel_id}"] .badge')).to_have_text("cancelled")
    shoot("09-runs")

    page.goto(service.url + "/nodes/")
    expect(page.locator("table")).to_contain_text("ready")
    shoot("10-reservations")

    page.goto(service.url + "/observations/?type=ising")
    expect(page.locator("svg.chart circle.point").first).to_be_visible()
    shoot("11-observations")
