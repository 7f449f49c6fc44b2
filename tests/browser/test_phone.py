"""At a phone's width (420 px) the run list shows each run's state and progress and the
timeline its bars, without a sideways swipe (real Chromium against Django's live server)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from runs.models import Attempt, Run, Task
from tests.api.conftest import running, submitted

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


def inside(page: Page, selector: str) -> None:
    """Every element of ``selector`` is drawn within the viewport's width."""
    boxes = [element.bounding_box() for element in page.locator(selector).all()]
    assert boxes, selector
    for box in boxes:
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH + 0.5, (selector, box)


def test_the_run_list_shows_state_and_progress_at_a_phones_width(page, live_server, owner, run):
    log_in(page, live_server, owner)
    row = f'tr[data-run="{run.id}"]'
    expect(page.locator(row)).to_have_count(1)
    inside(page, f"{row} td:nth-child(1)")
    inside(page, f"{row} .badge")
    inside(page, f"{row} .progress")
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH


def test_the_timelines_bars_are_on_screen_at_a_phones_width(page, live_server, owner, run):
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{run.id}/")
    bars = page.locator("svg.timeline rect.bar")
    expect(bars).to_have_count(2)  # the task and its attempt
    inside(page, "svg.timeline rect.bar")
    inside(page, "svg.timeline")
