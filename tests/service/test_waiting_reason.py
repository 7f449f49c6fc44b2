"""A task ready to start says why it waits, from its backend's status to its page, the API
and ``simrun show``."""

# ruff: noqa: F811  (the fixtures are imported from controller_support by name)
from __future__ import annotations

import pytest

from runs.models import Task
from tests.service.controller_support import (  # noqa: F401
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
)

pytestmark = pytest.mark.django_db
WHY = "waits for 4 cores; runs a and b hold 2 of 2"


def test_a_waiting_task_says_why_in_its_message_the_api_and_the_run_page(
    launch, fake, owner_client, client, owner
):
    run = launch({"tasks": {"sweep": {"type": "squares", "settings": {"n": 4}}}})
    name = fresh(run).workflow
    with fake.state() as state:
        state.workflows[name].waiting = {"sweep-w0": WHY}

    poll(fake)

    assert Task.objects.get(run=run, task_id="sweep").message == WHY
    [task] = owner_client.get(f"/api/runs/{run.id}/").json()["tasks"]
    assert task["message"] == WHY
    client.force_login(owner)
    assert WHY in client.get(f"/runs/{run.id}/").content.decode()
    with fake.state() as state:
        state.workflows[name].waiting = {}
        state.workflows[name].tasks["sweep-w0"] = "Running"
    poll(fake)
    assert Task.objects.get(run=run, task_id="sweep").message == ""
