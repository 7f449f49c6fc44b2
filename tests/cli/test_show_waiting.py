"""``simrun show`` says why a task waits (or failed): its message."""

from __future__ import annotations

import pytest

from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


def test_show_says_why_a_task_waits(simrun, owner):
    run = running(submitted(owner, "tasks:\n  sweep: {type: squares, settings: {n: 4}}\n"))
    holder = submitted(owner).id
    why = f"waits for 4 cores; run {holder} holds 2 of 2"
    run.tasks.filter(task_id="sweep").update(message=why)

    shown = simrun("show", run.id)

    assert shown.code == 0, shown.err
    assert f"sweep: {why}" in shown.out
