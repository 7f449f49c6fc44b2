"""A settled run's page body is written once per process (runs/reads/settled.py); a live
run's at every view; a write that counts the run's version up is seen at the next view."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from runs.models import Run, Task
from runs.web import run_views
from tests.factories import ended, running, submitted
from tests.runs_written import runs_written

pytestmark = pytest.mark.django_db


@pytest.fixture
def bodies_written(monkeypatch) -> list[str]:
    """The runs whose page body was computed, one entry a time."""
    return runs_written(monkeypatch, run_views, "_body_context")


def sweep_card(page: str) -> str:
    return page[page.index('id="task-sweep"') :]


def test_a_settled_run_body_is_written_once_and_again_after_a_write(alice, owner, bodies_written):
    run = ended(submitted(owner))
    first = alice.get(f"/runs/{run.id}/").content.decode()
    again = alice.get(f"/runs/{run.id}/").content.decode()
    assert bodies_written == [run.pk]
    assert sweep_card(again) == sweep_card(first)

    Task.objects.filter(run=run, task_id="sweep").update(message="a message written later")
    assert Run.objects.write_if_unchanged(run, message=run.message)  # the version counts up
    later = alice.get(f"/runs/{run.id}/").content.decode()
    assert bodies_written == [run.pk, run.pk]
    assert "a message written later" in sweep_card(later)


def test_each_viewer_and_each_results_link_gets_its_own_body(
    alice, operator, owner, bodies_written
):
    run = ended(submitted(owner))
    alice.get(f"/runs/{run.id}/")
    operator.get(f"/runs/{run.id}/")
    alice.get(f"/runs/{run.id}/?task=sweep&page=2")
    alice.get(f"/runs/{run.id}/")
    assert bodies_written == [run.pk] * 3


def test_a_live_run_body_is_written_at_every_view_as_its_durations_run_on(
    alice, owner, bodies_written
):
    run = running(submitted(owner), sweep="running")
    Task.objects.filter(run=run, task_id="sweep").update(started_at=timezone.now())
    now = timezone.now()
    with time_machine.travel(now + timedelta(minutes=5), tick=False):
        early = sweep_card(alice.get(f"/runs/{run.id}/").content.decode())
    with time_machine.travel(now + timedelta(hours=3), tick=False):
        late = sweep_card(alice.get(f"/runs/{run.id}/").content.decode())
    assert bodies_written == [run.pk, run.pk]
    assert early != late
