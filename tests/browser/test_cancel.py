"""The run page's Cancel against the page's own polling (real Chromium against Django's live
server): the notice a cancel answers with stays on the page whatever a poll sent before it
answers, and whenever."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, Route, expect

from runs.models import Run
from tests.browser.test_results import log_in
from tests.factories import running, submitted

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def run(owner) -> Run:
    return running(submitted(owner), sweep="running")


def until(page: Page, check: Callable[[], object]) -> None:
    """Let the page run (and Playwright call the route handlers) until ``check`` holds."""
    while not check():
        page.wait_for_timeout(20)


def test_a_cancel_keeps_its_notice_when_a_poll_sent_before_it_answers_first(
    page: Page, live_server, owner, run
):
    log_in(page, live_server, owner)
    page.goto(f"{live_server.url}/runs/{run.id}/")
    polls: list[Route] = []
    cancels: list[Route] = []
    page.route("**/live/", lambda route: polls.append(route))
    page.route("**/cancel/", lambda route: cancels.append(route))
    page.evaluate(
        """() => document.addEventListener('htmx:afterRequest', (event) => {
            if (event.detail.pathInfo.requestPath.endsWith('/live/')) {
                window.simrunPollsEnded = (window.simrunPollsEnded || 0) + 1
            }
        }, true)"""
    )
    until(page, lambda: polls)  # a poll is in flight, held
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Cancel run')")
    until(page, lambda: cancels)
    # The poll sent before the cancel answers first, with the run as it was: running.
    polls[0].continue_()
    page.wait_for_function("window.simrunPollsEnded >= 1")
    cancels[0].continue_()

    expect(page.locator("#run-live")).to_have_attribute("data-state", "cancelled")
    expect(page.locator("#run-live")).to_contain_text(f"Run {run.id} cancelled.")
    assert Run.objects.get(pk=run.pk).state == "cancelled"
