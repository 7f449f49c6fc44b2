"""A task starts when its first attempt did, not when a poll first saw it run."""

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
