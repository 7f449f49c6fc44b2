"""New run in a real browser: the line a YAML error names is marked in the editor."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import Page, expect

from tests.dashboard.test_new_run import BROKEN

pytestmark = pytest.mark.django_db(transaction=True)


def logged_in(page: Page, live_server, owner) -> None:
    """The browser holds alice's session, made by Django's client."""
    client = Client()
    client.force_login(owner)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])


def test_the_line_a_yaml_error_names_is_selected_in_the_editor(page: Page, live_server, owner):
    logged_in(page, live_server, owner)
    page.goto(live_server.url + "/runs/new/")
    page.fill("#spec", BROKEN)
    page.click("button:has-text('Submit run')")
    expect(page.locator("[role=alert]")).to_contain_text("line 4, column 4")
    editor = page.locator("#spec")
    expect(editor).to_be_focused()
    expect(editor).to_have_class("mono has-error-line")
    selected = editor.evaluate("e => e.value.slice(e.selectionStart, e.selectionEnd)")
    assert selected == "  b: 3"
    editor.press("End")
    editor.type("4")
    expect(editor).not_to_have_class("mono has-error-line")
