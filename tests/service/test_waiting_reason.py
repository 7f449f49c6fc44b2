"""A task ready to start says why it waits, from its backend's status to its page, the API
and ``simrun show``."""

# ruff: noqa: F811  (the fixtures are imported from controller_support by name)
from __future__ import annotations

import pytest

from runs.models import Task
from tests.factories import submitted
from tests.service.controller_support import (  # noqa: F401
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
)

pytestmark = pytest.mark.django_db


def test_a_waiting_task_says_why_in_its_message_the_api_and_the_run_page(
    launch, fake, owner_client, staff_client, client, owner, stranger
):
    mine, theirs = submitted(owner).id, submitted(stranger).id
    why = f"waits for 4 cores; runs {min(mine, theirs)} and {max(mine, theirs)} hold 2 of 2"
    run = launch({"tasks": {"sweep": {"type": "squares", "settings": {"n": 4}}}})
    name = fresh(run).workflow
    with fake.state() as state:
        state.workflows[name].waiting = {"sweep-w0": why}

    poll(fake)

    assert Task.objects.get(run=run, task_id="sweep").message == why
    [task] = owner_client.get(f"/api/runs/{run.id}/").json()["tasks"]
    # Another user's run is named to staff only (run ids of others are secret elsewhere).
    read = f"waits for 4 cores; run {mine} and other users' runs hold 2 of 2"
    assert task["message"] == read
    assert staff_client.get(f"/api/runs/{run.id}/").json()["tasks"][0]["message"] == why
    client.force_login(owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert read.replace("'", "&#x27;") in page and theirs not in page
    with fake.state() as state:
        state.workflows[name].waiting = {}
        state.workflows[name].tasks["sweep-w0"] = "Running"
    poll(fake)
    assert Task.objects.get(run=run, task_id="sweep").message == ""
