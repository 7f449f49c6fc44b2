"""At a phone's width (420 px) the run list shows each run's state and progress, the
timeline its bars and the DAG its every task, without a sideways swipe and with their words
at a readable size (real Chromium against Django's live server)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from runs.models import Attempt, Run, Task
from tests.browser.layout import within_width
from tests.factories import running, submitted

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTH = 420
LONG_NAME = "a-sweep-with-a-rather-long-name-for-a-phone"


@pytest.fixture
def run(owner) -> Run:
    found = running(submitted(owner), sweep="running")
    begin = timezone.now() - timedelta(seconds=60)
    Run.objects.filter(pk=found.pk).update(name=LONG_NAME, created_at=begin)
    Task.objects.filter(run=found, task_id="sweep").update(
        started_at=begin + timedelta(seconds=5), units_done=7
    )
    sweep = found.tasks.get(task_id="sweep")
    Attempt.objects.create(
        task=sweep, worker="sweep-w0", attempt=0, phase="Running",
        started_at=begin + timedelta(seconds=5),
    )  # fmt: skip
    return found


def log_in(page: Page, live_server, owner) -> None:
    owner.set_password("phone-password")
    owner.save()
    page.set_viewport_size({"width": WIDTH, "height": 860})
    page.goto(live_server.url + "/login/")
    page.fill("#id_username", owner.get_username())
    page.fill("#id_password", "phone-password")
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")


def test_the_run_list_shows_state_and_progress_at_a_phones_width(page, live_server, owner, run):
    log_in(page, live_server, owner)
    row = f'tr[data-run="{run.id}"]'
    expect(page.locator(row)).to_have_count(1)
    for part in ("td:nth-child(1)", ".badge", ".progress"):
        within_width(page.locator(f"{row} {part}"), WIDTH)
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH


READABLE_PX = 10
"""The least height on screen of a letter's box (font size × the drawing's scale) one reads."""

CHAIN = """
name: chain
tasks:
  sweep: {type: squares, settings: {n: 4}}
  stats: {type: csv-stats, inputs: {table: sweep}}
  report: {command: [ls, inputs/table], inputs: {table: stats}}
"""


def drawn_sizes(page: Page, selector: str) -> list[float]:
    """The on-screen font size of each visible text of ``selector``: its size in the drawing
    times the drawing's scale (its screen height over its own units)."""
    return page.evaluate(
        """(selector) => [...document.querySelectorAll(selector)]
            .filter((text) => text.getClientRects().length)
            .map((text) => {
              const svg = text.ownerSVGElement;
              const scale = svg.getScreenCTM().a;
              return parseFloat(getComputedStyle(text).fontSize) * scale;
            })""",
        selector,
    )


def test_the_timelines_bars_and_labels_are_on_screen_and_readable_at_a_phones_width(
    page, live_server, owner, run
):
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{run.id}/")
    timeline = page.locator("#timeline svg:visible")
    expect(timeline).to_have_count(1)
    bars = timeline.locator("rect.bar")
    expect(bars).to_have_count(2)  # the task and its attempt
    within_width(bars, WIDTH)
    within_width(timeline, WIDTH)
    sizes = drawn_sizes(page, "#timeline svg text")
    assert len(sizes) >= 3 and min(sizes) >= READABLE_PX, sizes  # two labels and a tick
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH


def test_every_task_of_the_dag_is_on_screen_and_readable_at_a_phones_width(
    page, live_server, owner, shoot
):
    chain = running(submitted(owner, CHAIN), sweep="running")
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{chain.id}/")
    dag = page.locator(".dag-wrap svg:visible").first
    for task in ("sweep", "stats", "report"):
        node = dag.locator(f'[data-task="{task}"] rect.box')
        expect(node).to_have_count(1)
        within_width(node, WIDTH)
    assert dag.locator("path.edge").count() == 2
    sizes = drawn_sizes(page, ".dag-wrap svg text")
    assert min(sizes) >= READABLE_PX, sizes
    shoot("phone-dag-and-timeline")
