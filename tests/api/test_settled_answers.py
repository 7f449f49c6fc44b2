"""A settled run's API answer is written once per process (runs/reads/settled.py): again after
a write that counts its version up or a change of its tags, and its re-runs read each time;
a live run's at every request."""

from __future__ import annotations

import pytest

from runs.api import views
from runs.models import Run, Task
from tests.factories import ended, running, submitted
from tests.runs_written import runs_written

pytestmark = pytest.mark.django_db


@pytest.fixture
def answers_written(monkeypatch) -> list[str]:
    """The runs whose answer was built, one entry a time."""
    return runs_written(monkeypatch, views, "detail_of")


def answer(client, run: Run) -> dict:
    response = client.get(f"/api/runs/{run.id}/")
    assert response.status_code == 200
    return response.json()


def sweep_of(found: dict) -> dict:
    return next(task for task in found["tasks"] if task["id"] == "sweep")


def test_a_settled_run_answer_is_built_once_and_again_after_a_write(
    owner_client, owner, answers_written
):
    run = ended(submitted(owner))
    first = answer(owner_client, run)
    assert answer(owner_client, run) == first
    assert answers_written == [run.id]

    Task.objects.filter(run=run, task_id="sweep").update(message="a message written later")
    assert Run.objects.write_if_unchanged(run, message=run.message)  # the version counts up
    assert sweep_of(answer(owner_client, run))["message"] == "a message written later"
    assert answers_written == [run.id, run.id]


def test_tags_and_re_runs_written_without_a_version_show_at_once(
    owner_client, owner, answers_written
):
    run = ended(submitted(owner))
    answer(owner_client, run)
    Run.objects.filter(pk=run.pk).update(tags=["paper"])  # as the labels' write does
    rerun = submitted(owner)
    Run.objects.filter(pk=rerun.pk).update(rerun_of=run)
    found = answer(owner_client, run)
    assert found["tags"] == ["paper"] and found["reruns"] == [rerun.id]


def test_each_viewer_gets_their_own_and_a_live_run_is_built_at_every_request(
    owner_client, staff_client, owner, answers_written
):
    settled = ended(submitted(owner))
    answer(owner_client, settled)
    answer(staff_client, settled)
    answer(owner_client, settled)
    live = running(submitted(owner), sweep="running")
    answer(owner_client, live)
    answer(owner_client, live)
    assert answers_written == [settled.id, settled.id, live.id, live.id]
