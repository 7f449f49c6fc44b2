"""Re-run through the API: the same spec (or an edit of it) as a new run, linked both ways."""

from __future__ import annotations

import pytest
from django.db import connection

from runs.models import Run, RunState
from runs.planning import submission
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db


def test_a_re_run_submits_the_same_spec_and_the_two_runs_name_each_other(owner_client, owner):
    source = ended(submitted(owner), RunState.FAILED)
    response = owner_client.post(f"/api/runs/{source.id}/rerun/")
    assert response.status_code == 201, response.content
    again = response.json()
    assert again["rerun_of"] == source.id and again["spec"] == source.spec
    assert again["state"] == RunState.SUBMITTING and again["owner"] == "alice"
    old = owner_client.get(f"/api/runs/{source.id}/").json()
    assert old["reruns"] == [again["id"]] and old["rerun_of"] is None
    listed = {r["id"]: r for r in owner_client.get("/api/runs/").json()["results"]}
    assert listed[again["id"]]["rerun_of"] == source.id


def test_a_re_run_with_a_body_submits_the_edited_spec(owner_client, owner):
    source = submitted(owner)
    edited = "name: edited\ntasks:\n  sweep: {type: squares, settings: {n: 3}}\n"
    response = owner_client.post(
        f"/api/runs/{source.id}/rerun/", data=edited, content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.name == "edited" and run.rerun_of_id == source.id


def test_an_edited_spec_that_is_not_valid_is_refused_by_field(owner_client, owner):
    source = submitted(owner)
    response = owner_client.post(
        f"/api/runs/{source.id}/rerun/",
        data="tasks: {sweep: {type: squares, settings: {n: 0}}}",
        content_type="application/yaml",
    )
    assert response.status_code == 400 and "tasks.sweep.settings.n" in response.json()
    assert Run.objects.count() == 1


def test_another_users_run_cannot_be_re_run(stranger_client, owner):
    source = submitted(owner)
    assert stranger_client.post(f"/api/runs/{source.id}/rerun/").status_code == 404
    assert Run.objects.count() == 1


def test_staff_re_run_a_users_run_as_that_users_never_as_their_own(
    staff_client, owner_client, owner
):
    source = submitted(owner)
    answer = staff_client.post(f"/api/runs/{source.id}/rerun/")
    assert answer.status_code == 201, answer.content
    again = answer.json()
    assert again["owner"] == "alice"  # its code runs as alice's task user, not the operator's
    assert again["submitted_by"] == "operator" and again["rerun_of"] == source.id
    assert owner_client.get(f"/api/runs/{source.id}/").json()["reruns"] == [again["id"]]
    assert owner_client.get(f"/api/runs/{again['id']}/").json()["submitted_by"] == "operator"
    mine = owner_client.post(f"/api/runs/{source.id}/rerun/").json()
    assert mine["owner"] == "alice" and mine["submitted_by"] is None


def test_staffs_edit_of_a_users_run_is_that_users_and_names_only_their_snapshots(
    staff_client, owner
):
    source = submitted(owner)
    digest = "0" * 64
    edited = f"tasks:\n  sweep: {{type: squares, settings: {{n: 3}}}}\nsources: [{digest}]\n"
    answer = staff_client.post(
        f"/api/runs/{source.id}/rerun/", data=edited, content_type="application/yaml"
    )
    assert answer.status_code == 400 and "sources.0" in answer.json()  # not alice's snapshot


@pytest.mark.django_db(transaction=True)
def test_a_re_runs_sources_are_learned_outside_any_transaction(owner_client, owner, monkeypatch):
    """Learning runs the sources' code, for seconds: a transaction open meanwhile would hold
    SQLite's write lock against the control loop, as a first submission's does not."""
    source = ended(submitted(owner), RunState.FAILED)
    in_transaction = []
    learn = submission.run_types

    def learned(*args, **kwargs):
        in_transaction.append(connection.in_atomic_block)
        return learn(*args, **kwargs)

    monkeypatch.setattr(submission, "run_types", learned)
    response = owner_client.post(f"/api/runs/{source.id}/rerun/")
    assert response.status_code == 201, response.content
    assert in_transaction == [False]
    assert Run.objects.get(pk=response.json()["id"]).rerun_of_id == source.id
