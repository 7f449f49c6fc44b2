"""The admin as the operators' tool: lists, read-only observed fields, actions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from runs.models import Run, RunState
from tests.factories import ended, running, submitted

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="root-password"))
    return client


def act(client: Client, action: str, *runs: Run):
    return client.post(
        "/admin/runs/run/",
        {"action": action, "_selected_action": [r.id for r in runs]},
        follow=True,
    )


@pytest.mark.parametrize(
    "url",
    [
        "/admin/runs/run/",
        "/admin/runs/task/",
        "/admin/runs/attempt/",
        "/admin/runs/observation/",
        "/admin/runs/snapshot/",
    ],
)
@pytest.mark.parametrize("rows", [1, 60])
def test_every_list_opens_in_a_constant_number_of_queries(
    admin_client_, owner, url, rows, django_assert_max_num_queries
):
    for _ in range(rows):
        submitted(owner)
    with django_assert_max_num_queries(12):
        assert admin_client_.get(url).status_code == 200


def test_a_run_is_read_only_with_its_tasks_inline(admin_client_, owner):
    run = submitted(owner)
    page = admin_client_.get(f"/admin/runs/run/{run.id}/change/").content.decode()
    assert "sweep" in page and "summary" in page and 'name="state"' not in page
    assert admin_client_.get("/admin/runs/run/add/").status_code == 403


def test_operators_cancel_runs_from_the_list(
    admin_client_, owner, settled, django_capture_on_commit_callbacks
):
    live, done = running(submitted(owner)), ended(submitted(owner))
    with django_capture_on_commit_callbacks(execute=True):
        page = act(admin_client_, "cancel_runs", live, done).content.decode()
    assert f"Cancelled {live.id}." in page and "has ended" in page
    assert Run.objects.get(pk=live.pk).state == RunState.CANCELLED
    assert Run.objects.get(pk=done.pk).state == RunState.SUCCEEDED and settled == [live.id]


def test_operators_settle_ended_runs_now(admin_client_, owner, settled):
    live, done = running(submitted(owner)), ended(submitted(owner), pending_logs=True)
    page = act(admin_client_, "settle_now", live, done).content.decode()
    assert settled == [done.id] and "1 live run(s) left to the control loop" in page


def test_operators_release_the_node_of_an_ended_run(
    admin_client_, owner, settled, django_capture_on_commit_callbacks
):
    holder = ended(submitted(owner), RunState.FAILED, reserved_node="node-a")
    live = running(submitted(owner))
    Run.objects.filter(pk=live.pk).update(reserved_node="node-b")
    with django_capture_on_commit_callbacks(execute=True):
        page = act(admin_client_, "release_reservations", holder, live).content.decode()
    assert f"The node node-a will be released from run {holder.id}." in page and "cancel it" in page
    assert Run.objects.get(pk=holder.pk).pending_release
    assert not Run.objects.get(pk=live.pk).pending_release and settled == [holder.id]
