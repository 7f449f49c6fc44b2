"""The run page and the logs page in a real browser against ``simrun serve``: a logs page opened
before its task starts follows it once it does, the timeline grows as tasks run, re-run links
both runs, and the pages fit a phone's width."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_scenario import PASSWORD, log_in
from tests.e2e.service import SIMRUN, Service

pytestmark = pytest.mark.slow

RUN_TIMEOUT_MS = 120_000
GREETING = "the second task says hello"


def waiting_spec(go: Path) -> str:
    """A run whose first task waits for the file ``go``, the test's signal, then a second one."""
    until = f"lambda: os.path.exists({str(go)!r})"
    wait = f"import os, time; [time.sleep(0.2) for _ in iter({until}, True)]"
    return (
        "name: waits-for-a-file\n"
        "tasks:\n"
        f"  first: {{command: [python3, -c, {wait!r}]}}\n"
        f"  second: {{command: [python3, -c, \"print('{GREETING}')\"], inputs: {{x: first}}}}\n"
    )


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    started = Service(home=tmp_path_factory.mktemp("browser-run-page") / "home")
    started.start()
    subprocess.run(
        [SIMRUN, "user", "alice", "--password", PASSWORD],
        env=started.env(),
        check=True,
        capture_output=True,
    )
    yield started
    assert started.stop() == 0


def submit_text(page: Page, service: Service, text: str) -> str:
    page.goto(service.url + "/runs/new/")
    page.fill("#spec", text)
    page.click("button:has-text('Submit run')")
    page.wait_for_url(re.compile(r"/runs/[a-z0-9]+/$"))
    return page.url.rstrip("/").rsplit("/", 1)[1]


@pytest.fixture
def signal_folder(service: Service) -> Iterator[Path]:
    """A folder the run's processes can read: they may run as a user of their own, and the
    machine's /tmp is not theirs (a task has its own), the service's store is."""
    folder = Path(tempfile.mkdtemp(prefix="simrun-signal-", dir=service.store))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_logs_page_opened_before_its_task_follows_it_and_the_timeline_grows(
    page: Page, service: Service, shoot, signal_folder
):
    go = signal_folder / "go"
    log_in(page, service)
    run_id = submit_text(page, service, waiting_spec(go))
    timeline = page.locator("svg.timeline")
    expect(timeline.locator('[data-row="first"][data-drawn]')).to_have_count(
        1, timeout=RUN_TIMEOUT_MS
    )
    expect(timeline.locator('[data-row="second"][data-drawn]')).to_have_count(0)
    shoot("20-timeline-first-running")

    page.goto(f"{service.url}/runs/{run_id}/tasks/second/logs/")
    expect(page.locator("#logs-page")).to_have_attribute("data-waiting", "true")
    expect(page.locator("[data-no-logs]")).to_contain_text("No logs yet")
    page.evaluate("window.simrunMarker = 'not reloaded'")
    shoot("21-logs-waiting")
    go.write_text("go")  # the first task ends, the second starts
    go.chmod(0o644)
    expect(page.locator("#log .log-text")).to_contain_text(GREETING, timeout=RUN_TIMEOUT_MS)
    expect(page.locator("#logs-page")).to_have_attribute("data-waiting", "false")
    assert page.evaluate("window.simrunMarker") == "not reloaded"
    shoot("22-logs-followed")

    page.goto(f"{service.url}/runs/{run_id}/")
    page.evaluate("window.simrunMarker = 'not reloaded'")
    expect(page.locator("#run-live")).to_have_attribute(
        "data-state", "succeeded", timeout=RUN_TIMEOUT_MS
    )
    expect(timeline.locator("[data-kind=task][data-drawn]")).to_have_count(2)
    first = timeline.locator('[data-row="first"] rect.bar').bounding_box()
    second = timeline.locator('[data-row="second"] rect.bar').bounding_box()
    assert first and second and second["x"] >= first["x"] + first["width"] - 2, (first, second)
    assert page.evaluate("window.simrunMarker") == "not reloaded"
    shoot("23-timeline-succeeded")


def test_an_opened_why_stays_open_across_the_live_refreshes(
    page: Page, service: Service, signal_folder
):
    go = signal_folder / "go"
    log_in(page, service)
    submit_text(page, service, waiting_spec(go))
    why = page.locator("#task-first details.why")
    why.locator("summary").click()
    expect(why).to_have_attribute("open", "")
    for _ in range(2):  # two refreshes of the live region: each replaces it with a new element
        page.evaluate("document.getElementById('run-live').simrunSeen = true")
        page.wait_for_function(
            "!document.getElementById('run-live').simrunSeen", timeout=RUN_TIMEOUT_MS
        )
        expect(why).to_have_attribute("open", "")
    go.write_text("go")
    # Ended before the folder of the signal goes: a run left waiting holds a core of the
    # module's service, and the next test's task would wait for it.
    expect(page.locator("#run-live")).to_have_attribute(
        "data-state", "succeeded", timeout=RUN_TIMEOUT_MS
    )


def test_the_api_docs_render_offline_with_no_script_style_or_font_from_elsewhere(
    page: Page, service: Service
):
    elsewhere: list[tuple[str, str]] = []

    def offline(route) -> None:  # as a machine without internet: only the service answers
        if route.request.url.startswith(service.url):
            route.continue_()
        else:
            elsewhere.append((route.request.resource_type, route.request.url))
            route.abort()

    page.route("**/*", offline)
    page.goto(f"{service.url}/api/docs/")
    expect(page.locator("h1").first).to_contain_text("simrun API", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_text("/api/runs/").first).to_be_visible()
    # Redoc's own "by Redocly" logo may ask its CDN (hidden when it fails); nothing it needs.
    assert [(kind, url) for kind, url in elsewhere if kind != "image"] == []


def test_re_run_from_the_page_links_the_two_runs(page: Page, service: Service, shoot):
    log_in(page, service)
    source = submit_text(page, service, "name: once-more\ntasks:\n  hi: {command: [echo, hi]}\n")
    page.click("button:has-text('Re-run')")
    page.wait_for_url(re.compile(r"/runs/[a-z0-9]+/$"))
    again = page.url.rstrip("/").rsplit("/", 1)[1]
    assert again != source
    expect(page.locator("[data-rerun-of] a")).to_have_text(source)
    shoot("24-rerun")
    page.click("[data-rerun-of] a")
    expect(page.locator("[data-reruns] a")).to_have_text(again)
    page.click("a:has-text('Edit and re-run')")
    expect(page.locator("h1")).to_contain_text("Re-run once-more")
    assert "echo" in page.input_value("#spec")
    page.fill("#spec", page.input_value("#spec").replace("once-more", "edited"))
    page.click("button:has-text('Submit run')")
    page.wait_for_url(re.compile(r"/runs/[a-z0-9]+/$"))
    expect(page.locator("h1")).to_contain_text("edited")
    expect(page.locator("[data-rerun-of] a")).to_have_text(source)


def test_the_pages_fit_a_phone_width(page: Page, service: Service, shoot):
    page.set_viewport_size({"width": 420, "height": 860})
    log_in(page, service)
    run_id = submit_text(page, service, "name: narrow\ntasks:\n  hi: {command: [echo, hi]}\n")
    for path in ("/", f"/runs/{run_id}/", "/runs/new/", "/placements/"):
        page.goto(service.url + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 420, f"{path} is {width} px wide at 420"
        for link in page.locator(".mainnav a").all():
            box = link.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 420, (path, box)
    page.goto(service.url + "/")
    shoot("25-runs-at-420px")


HOLDING = (
    "name: live-rows\ntasks:\n  hold: {type: alloc, settings: {units: 1, mb: 96, hold_s: 600}}\n"
)
"""One worker whose unit holds 96 MiB until the run is cancelled."""


def test_a_running_worker_has_a_live_row_with_a_ticking_duration_and_a_sparkline(
    page: Page, service: Service, shoot
):
    log_in(page, service)
    submit_text(page, service, HOLDING)
    row = page.locator('tr[data-attempt="hold-w0-0"]')
    expect(row).to_have_attribute("data-running", "", timeout=RUN_TIMEOUT_MS)
    expect(row.locator("[data-col=phase]")).to_have_text("Running")
    expect(row.locator("[data-col=node]")).not_to_have_text("–")
    expect(row.locator("[data-col=started]")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d$"))
    duration = row.locator("[data-col=duration]")
    page.route("**/live/", lambda route: route.abort())  # no refresh: the page's clock ticks
    first = duration.inner_text()
    expect(duration).not_to_have_text(first)
    page.unroute("**/live/")

    line = row.locator("svg[data-sparkline] polyline")
    expect(line).to_have_count(1, timeout=RUN_TIMEOUT_MS)
    points = line.get_attribute("points")
    expect(line).not_to_have_attribute("points", points or "")  # new samples come in
    expect(row.locator("[data-peak]")).to_have_text(re.compile(r"^0\.\d+ GiB$"))
    shoot("26-live-attempt-row")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Cancel run')")
    expect(page.locator("#run-live")).to_have_attribute("data-state", "cancelled")
    expect(row).not_to_have_attribute("data-running", "")
    expect(row.locator("[data-col=phase]")).to_have_text("Stopped")
    expect(row.locator("[data-peak]")).to_have_text(re.compile(r"^0\.\d+ GiB$"))
    shoot("27-live-attempt-cancelled")
