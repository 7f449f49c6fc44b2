"""A plan's reason: one plain sentence on the run page and in the API, the arithmetic a click
away."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import submitted

pytestmark = pytest.mark.django_db


def test_the_run_page_shows_the_plain_sentence_and_the_arithmetic_behind_a_click(owner):
    run = submitted(owner)
    sweep = run.tasks.get(task_id="sweep")
    assert sweep.plan["why_short"].endswith(".")
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    summary = f'<summary><span class="muted">why:</span> {sweep.plan["why_short"]}</summary>'
    assert summary in page
    assert sweep.plan["why"].split(";")[0] in page


def test_the_api_answers_each_plan_with_its_plain_sentence_beside_its_arithmetic(owner):
    run = submitted(owner)
    client = APIClient()
    client.force_authenticate(owner)
    answer = client.get(f"/api/runs/{run.id}/", format="json").json()
    plans = {task["id"]: task["plan"] for task in answer["tasks"]}
    assert plans["sweep"]["why_short"] == run.tasks.get(task_id="sweep").plan["why_short"]
    assert plans["sweep"]["why"]
