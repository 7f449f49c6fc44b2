"""A cancelled run's attempts are recorded as they really ended, once its workflow ended."""

# ruff: noqa: F811  (the fixtures are imported from controller_support by name)
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runs.backends.base import FailedAttempt
from runs.control import cancelling, settling
from runs.models import Attempt
from tests.service.controller_support import (  # noqa: F401
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
)

pytestmark = pytest.mark.django_db
ENDED = 1_800_000_000.0


def test_a_cancelled_runs_attempts_get_their_exit_code_how_and_when_they_ended(launch, fake):
    run = launch({"tasks": {"say": {"command": ["sleep", "60"]}}})
    name = fresh(run).workflow
    fake.set_nodes(name, {"say": "Running"})
    fake.set_phase(name, "Running")
    poll(fake)
    cancelling.request_cancel(fresh(run))
    stopped = "stopped by the cancellation of its run (exit code 143)"
    with fake.state() as state:
        state.workflows[name].failed["say"] = [
            FailedAttempt(attempt=0, exit_code=143, node="here", message=stopped, ended_at=ENDED)
        ]

    settling.settle(run.id, backend=fake)

    attempt = Attempt.objects.get(task__run=run)
    assert (attempt.worker, attempt.phase, attempt.exit_code, attempt.node_name) == (
        "say",
        "Failed",
        143,
        "here",
    )
    assert attempt.ended_at == datetime.fromtimestamp(ENDED, tz=UTC)
    assert not fresh(run).pending_logs


def test_the_ends_of_a_cancelled_run_wait_until_its_processes_ended(launch, fake):
    run = launch({"tasks": {"say": {"command": ["sleep", "60"]}}})
    cancelling.request_cancel(fresh(run))
    fake.set_phase(fresh(run).workflow, "Running")  # still ending

    assert not settling.record_ends(fresh(run), list(run.tasks.all()), backend=fake)
    fake.set_phase(fresh(run).workflow, "Failed")
    assert settling.record_ends(fresh(run), list(run.tasks.all()), backend=fake)
