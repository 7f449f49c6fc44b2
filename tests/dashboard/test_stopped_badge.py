"""A task a cancel stopped while it ran stays skipped in its record (as the spec says), but its
badge, the API and ``simrun show`` say what happened: "stopped: run cancelled"."""

from __future__ import annotations

import pytest
from django.test import Client

from runs.control import cancelling, closing
from runs.models import RunState, Task, TaskState
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


@pytest.fixture
def cancelled(owner, backend):
    run = running(submitted(owner), sweep="running")
    cancelling.cancel(run.id)
    return run


def badge(html: str, task_id: str) -> str:
    card = html.split(f'id="task-{task_id}"', 1)[1].split("</article>", 1)[0]
    return card.split('<span class="badge', 1)[1].split("</span>", 1)[0]


def test_a_task_a_cancel_stopped_reads_stopped_on_its_pages(cancelled, owner):
    assert Task.objects.get(run=cancelled, task_id="sweep").state == TaskState.SKIPPED
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{cancelled.id}/").content.decode()
    assert badge(page, "sweep") == ' state-stopped">stopped: run cancelled'
    assert badge(page, "summary") == ' state-skipped">skipped'  # it never ran
    logs = client.get(f"/runs/{cancelled.id}/tasks/sweep/logs/").content.decode()
    assert '<span class="badge state-stopped">stopped: run cancelled</span>' in logs


def test_a_failed_runs_stopped_task_reads_failed_whatever_its_message_says(owner, backend):
    """What stopped a task is a field, never read from a message: a failure whose words begin
    with "cancelled" (as a scheduler's may) is still a failure."""
    run = running(submitted(owner), sweep="running")
    closing.close_run(run, list(run.tasks.all()), RunState.FAILED, "cancelled by the scheduler")
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert badge(page, "sweep") == ' state-stopped">stopped: run failed'
    shown = client.get(f"/api/runs/{run.id}/").json()
    assert {t["id"]: t["shown_state"] for t in shown["tasks"]}["sweep"] == "stopped: run failed"
