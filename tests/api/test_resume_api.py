"""Resume through the API: ``resume_of`` submits a re-run that reuses what its source
finished, and the run says what each task reused."""

from __future__ import annotations

import pytest

from runs.common import store
from runs.control import submitting
from runs.models import Run, RunState, Task, TaskState
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db

EDITED = """
tasks:
  sweep: {type: squares, settings: {n: 20}, workers: 3}
  summary: {type: csv-stats, inputs: {table: sweep}, settings: {port: other}}
"""


def with_outputs(run: Run) -> Run:
    """A run whose tasks succeeded, each with its outputs in the store."""
    for task in run.tasks.all():
        out = store.task_dir(run.id, task.task_id) / "out"
        out.mkdir(parents=True)
        (out / "result.txt").write_text(task.task_id)
    return ended(run, RunState.SUCCEEDED)


def test_resume_of_submits_a_re_run_of_the_same_spec_that_names_its_source(owner_client, owner):
    source = ended(submitted(owner), RunState.FAILED)
    response = owner_client.post(f"/api/runs/?resume_of={source.id}")
    assert response.status_code == 201, response.content
    again = response.json()
    assert again["resume_of"] == again["rerun_of"] == source.id
    assert again["spec"] == source.spec and again["owner"] == "alice"
    assert owner_client.get(f"/api/runs/{source.id}/").json()["reruns"] == [again["id"]]
    plain = owner_client.post(f"/api/runs/{source.id}/rerun/").json()
    assert plain["resume_of"] is None and plain["rerun_of"] == source.id


def test_a_resume_with_a_body_submits_the_edited_spec(owner_client, owner):
    source = ended(submitted(owner), RunState.CANCELLED)
    response = owner_client.post(
        f"/api/runs/?resume_of={source.id}", data=EDITED, content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.resume and run.rerun_of_id == source.id
    assert run.spec["tasks"]["summary"]["settings"] == {"port": "other"}


@pytest.mark.parametrize("who", ["stranger", "nobody"])
def test_a_run_you_may_not_see_cannot_be_resumed_and_is_named_as_unknown(
    stranger_client, owner, who
):
    source = ended(submitted(owner), RunState.FAILED)
    run_id = source.id if who == "stranger" else "nosuchrun"
    response = stranger_client.post(f"/api/runs/?resume_of={run_id}")
    assert response.status_code == 400
    assert response.json() == {"resume_of": [f"no run {run_id!r} of yours"]}
    assert Run.objects.count() == 1


def test_a_run_that_has_not_ended_cannot_be_resumed(owner_client, owner):
    source = submitted(owner)
    response = owner_client.post(f"/api/runs/?resume_of={source.id}")
    assert response.status_code == 400
    assert "has not ended (submitting)" in response.json()["resume_of"][0]
    assert Run.objects.count() == 1


def test_a_bad_edited_spec_is_refused_by_field(owner_client, owner):
    source = ended(submitted(owner), RunState.FAILED)
    response = owner_client.post(
        f"/api/runs/?resume_of={source.id}",
        data="tasks: {sweep: {type: squares, settings: {n: 0}}}",
        content_type="application/yaml",
    )
    assert response.status_code == 400 and "tasks.sweep.settings.n" in response.json()


def test_each_task_says_what_it_reused_and_from_which_run(owner_client, owner, backend):
    source = with_outputs(submitted(owner))
    response = owner_client.post(
        f"/api/runs/?resume_of={source.id}", data=EDITED, content_type="application/yaml"
    )
    run_id = response.json()["id"]
    assert submitting.submit(run_id, backend=backend)

    tasks = {t["id"]: t for t in owner_client.get(f"/api/runs/{run_id}/").json()["tasks"]}

    sweep, summary = tasks["sweep"], tasks["summary"]
    assert sweep["reused_from"] == {"run": source.id, "task": "sweep"}
    assert (sweep["state"], sweep["shown_state"]) == ("done", f"reused from {source.id}")
    assert sweep["units_reused"] == sweep["units_done"] == sweep["units_total"] == 20
    assert sweep["key"] == Task.objects.get(run=source, task_id="sweep").key
    assert summary["reused_from"] is None and summary["units_reused"] == 0
    assert summary["shown_state"] == TaskState.WAITING
    assert summary["not_reused"] == (
        f"not reused from {source.id}/summary: its settings or command changed"
    )


def test_a_resume_by_staff_of_another_users_run_is_the_owners_and_reuses_their_work(
    staff_client, owner, staff, backend
):
    source = with_outputs(submitted(owner))
    response = staff_client.post(f"/api/runs/?resume_of={source.id}")
    assert response.status_code == 201, response.content
    answer = response.json()
    assert (answer["owner"], answer["submitted_by"]) == ("alice", staff.get_username())
    assert submitting.submit(answer["id"], backend=backend)

    tasks = staff_client.get(f"/api/runs/{answer['id']}/").json()["tasks"]
    assert {t["id"]: t["reused_from"]["run"] for t in tasks} == dict.fromkeys(
        ("sweep", "summary"), source.id
    )
