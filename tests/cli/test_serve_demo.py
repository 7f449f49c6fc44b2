"""``simrun serve --demo``'s user: it logs in and opens the Django admin the README advertises."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from runs.cli import serve
from runs.models import Run

pytestmark = pytest.mark.django_db


def test_the_demo_user_is_staff_and_opens_the_admin(tmp_path) -> None:
    said = serve.demo(tmp_path)

    password = (tmp_path / "demo-login").read_text()
    assert f"log in as demo / {password}" in said
    assert User.objects.get(username="demo").is_staff
    browser = Client()
    assert browser.login(username="demo", password=password)
    assert browser.get("/admin/").status_code == 200
    assert browser.get("/admin/runs/run/").status_code == 200


def test_the_demo_run_keeps_the_text_of_its_spec(tmp_path) -> None:
    serve.demo(tmp_path)

    assert Run.objects.get().spec_text == serve.DEMO_SPEC.read_text()
