"""New run and Edit and re-run: the text as the user wrote it, problems shown in the form."""

from __future__ import annotations

import html
import logging
from urllib.parse import urlencode

import pytest
from django.test import Client

from runs.models import Run

pytestmark = pytest.mark.django_db

COMMENTED = """\
# the quick sweep, with its notes
name: noted   # a label
tasks:
  sweep:
    type: squares
    settings: {n: 5}
  tail:
    command:
      - python3
      - -c
      - |
        import sys
        print("two lines")
"""


def edit_text_of(page: str) -> str:
    start = page.index(">", page.index('<textarea id="spec"')) + 1
    return html.unescape(page[start : page.index("</textarea>", start)])


def edit_form_text(client: Client, run: Run) -> str:
    return edit_text_of(client.get(f"/runs/new/?rerun={run.id}").content.decode())


def test_edit_and_re_run_starts_from_the_text_as_submitted(alice, queued):
    response = alice.post("/runs/new/", {"spec": COMMENTED})
    assert response.status_code == 302
    source = Run.objects.get()
    assert source.spec_text == COMMENTED
    assert edit_form_text(alice, source) == COMMENTED  # comments, no inputs: {}, a block string


def test_the_edited_text_is_kept_and_a_plain_re_run_keeps_the_sources(alice, queued):
    alice.post("/runs/new/", {"spec": COMMENTED})
    source = Run.objects.get()
    edited = COMMENTED.replace("n: 5}", "n: 7}  # more")
    alice.post("/runs/new/", {"spec": edited, "rerun_of": source.id})
    again = Run.objects.get(rerun_of=source)
    assert again.spec_text == edited and edit_form_text(alice, again) == edited
    alice.post(f"/runs/{again.id}/rerun/")
    assert Run.objects.get(rerun_of=again).spec_text == edited


def test_a_spec_submitted_through_the_api_is_edited_as_its_text(owner_client, alice, queued):
    response = owner_client.post("/api/runs/", data=COMMENTED, content_type="application/yaml")
    assert response.status_code == 201
    run = Run.objects.get(pk=response.json()["id"])
    assert edit_form_text(alice, run) == COMMENTED
    body = COMMENTED.replace("noted", "renamed")
    again = owner_client.post(f"/api/runs/{run.id}/rerun/", data=body, content_type="text/yaml")
    assert again.status_code == 201
    assert Run.objects.get(pk=again.json()["id"]).spec_text == body


def test_a_spec_too_large_for_the_form_comes_back_in_it_cut_with_the_error_and_one_log_line(
    alice, caplog
):
    lines = [f"    # note {i:07d} {'x' * 60}\n" for i in range(70_000)]  # about 5 MB
    text = "name: huge\ntasks:\n  sweep:\n    type: squares\n" + "".join(lines)
    body = urlencode({"csrfmiddlewaretoken": "x", "spec": text})
    assert len(body) > 5_000_000
    with caplog.at_level(logging.INFO):
        response = alice.post(
            "/runs/new/", data=body, content_type="application/x-www-form-urlencoded"
        )
    assert response.status_code == 413
    page = response.content.decode()
    assert 'role="alert"' in page and "nothing was submitted" in page
    kept = edit_text_of(page)
    assert text.startswith(kept) and kept.endswith("\n") and kept.startswith("name: huge")
    assert 900_000 < len(kept.encode()) <= 1024 * 1024
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and "past its cap" in logged[0].getMessage()
    assert not logged[0].exc_info and not Run.objects.exists()


BROKEN = "name: broken\ntasks:\n  a: {type: squares\n  b: 3\n"
"""YAML that stops reading at line 4: a flow mapping left open on line 3."""


def test_a_yaml_error_keeps_its_lines_and_the_editor_is_told_its_line(alice):
    response = alice.post("/runs/new/", {"spec": BROKEN})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-error-line="4"' in page and "spec_editor.js" in page
    assert "line 4, column 4:\n      b: 3\n       ^" in html.unescape(page)
    assert edit_text_of(page) == BROKEN
