"""A task starts when its first attempt did and ends when its last did, not when a poll saw it."""

from __future__ import annotations

import time

import pytest

from runs.models import Attempt, Task
from tests.service.controller_support import (  # noqa: F401
    fake,
    home,
    launch,
    poll,
    sent,
    states,
    write_report,
)

pytestmark = pytest.mark.django_db


def test_a_task_seen_running_late_starts_with_its_first_attempt(launch, fake):  # noqa: F811
    run = launch()
    began = time.time() - 7  # the process started 7 s before the poll that sees it
    fake.set_phase(run.workflow, "Running")
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    with fake.state() as state:
        state.workflows[run.workflow].started["sweep-w0"] = began
    poll(fake)
    assert states(run)["sweep"] == "running"
    task = Task.objects.get(run=run, task_id="sweep")
    attempt = Attempt.objects.get(task=task, worker="sweep-w0", attempt=0)
    assert attempt.started_at is not None
    assert task.started_at == attempt.started_at


def test_a_task_seen_ended_late_ends_with_its_last_attempt(launch, fake):  # noqa: F811
    run = launch({"tasks": {"hi": {"command": ["echo", "hi"]}}})
    began = time.time() - 20  # the process ran 3 s, 17 s before the poll that sees its end
    write_report(run, "hi", 0, started=began, prepare_seconds=0.0, seconds=3.0)
    fake.set_phase(run.workflow, "Running")
    fake.set_nodes(run.workflow, {"hi": "Succeeded"})
    with fake.state() as state:
        state.workflows[run.workflow].started["hi"] = began
    poll(fake)
    assert states(run)["hi"] == "done"
    task = Task.objects.get(run=run, task_id="hi")
    attempt = Attempt.objects.get(task=task, worker="hi", attempt=0)
    assert attempt.ended_at is not None and attempt.ended_at.timestamp() == pytest.approx(began + 3)
    assert (task.started_at, task.ended_at) == (attempt.started_at, attempt.ended_at)
