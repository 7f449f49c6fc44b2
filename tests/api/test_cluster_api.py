"""Nodes, placements and the release of reservations through the API."""

from __future__ import annotations

import pytest

from runs.models import Run, RunState
from tests.factories import ended, pod, running, submitted

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(backend, owner, stranger):
    """Two nodes; alice's run on node-a holding it, mallory's run on node-a and node-b."""
    backend.add_node("node-a", cores=8, memory_gb=32)
    backend.add_node("node-b", cores=4, memory_gb=16)
    mine = running(submitted(owner))
    theirs = running(submitted(stranger))
    backend.reserve("node-a", mine.id)
    Run.objects.filter(pk=mine.pk).update(reserved_node="node-a")
    backend.set_placements(
        [
            pod(mine),
            pod(theirs, cores=1, memory_gb=4),
            pod(theirs, node="node-b"),
            pod(theirs, node=None),
        ]
    )
    return {"mine": Run.objects.get(pk=mine.pk), "theirs": theirs}


def test_a_user_sees_the_pods_of_their_runs_only(owner_client, cluster):
    body = owner_client.get("/api/placements/").json()
    assert [(p["run"], p["node"]) for p in body] == [(cluster["mine"].id, "node-a")]
    assert body[0]["cores"] == 2 and body[0]["worker"] == "sweep-w0"


def test_staff_see_every_pod(staff_client, cluster):
    body = staff_client.get("/api/placements/").json()
    assert sorted((p["run"], p["node"] or "") for p in body) == sorted(
        [
            (cluster["mine"].id, "node-a"),
            (cluster["theirs"].id, "node-a"),
            (cluster["theirs"].id, "node-b"),
            (cluster["theirs"].id, ""),
        ]
    )


def test_nodes_show_the_use_of_every_pod_and_reservations_only_to_those_who_may_see_them(
    owner_client, stranger_client, staff_client, cluster
):
    mine = cluster["mine"]
    nodes = {n["name"]: n for n in owner_client.get("/api/nodes/").json()}
    assert set(nodes) == {"node-a", "node-b"}
    assert nodes["node-a"]["cores_used"] == 3 and nodes["node-a"]["memory_gb_used"] == 5.5
    assert nodes["node-a"]["pods"] == 2 and nodes["node-b"]["pods"] == 1
    assert nodes["node-a"]["reserved"] is True and nodes["node-a"]["reserved_by"] == mine.id
    theirs = {n["name"]: n for n in stranger_client.get("/api/nodes/").json()}
    assert theirs["node-a"]["reserved"] is True and theirs["node-a"]["reserved_by"] is None
    staff = {n["name"]: n for n in staff_client.get("/api/nodes/").json()}
    assert staff["node-a"]["reserved_by"] == mine.id and staff["node-b"]["reserved"] is False


@pytest.mark.parametrize("path", ["/api/nodes/", "/api/placements/"])
def test_machines_are_401_for_anonymous(anonymous_client, path):
    assert anonymous_client.get(path).status_code == 401


@pytest.mark.parametrize("path", ["/api/nodes/", "/api/placements/"])
def test_a_backend_that_does_not_answer_is_a_503_not_a_crash(owner_client, backend, path):
    backend.fail_next("nodes", "RuntimeError", "connection refused")
    response = owner_client.get(path)
    assert response.status_code == 503 and "connection refused" in response.json()["detail"]


def test_staff_release_the_node_of_an_ended_run_through_settle(
    staff_client, cluster, settled, django_capture_on_commit_callbacks
):
    mine = ended(cluster["mine"], RunState.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post("/api/nodes/node-a/release/")
    assert response.status_code == 202 and response.json() == {"node": "node-a", "run": mine.id}
    stored = Run.objects.get(pk=mine.pk)
    assert stored.pending_release and stored.reserved_node == "node-a"
    assert settled == [mine.id]


def test_no_backend_call_changes_anything_from_a_release_request(staff_client, cluster, backend):
    ended(cluster["mine"])
    staff_client.post("/api/nodes/node-a/release/")
    assert backend.called("unreserve") == []


def test_a_live_run_keeps_its_node(staff_client, cluster, settled):
    response = staff_client.post("/api/nodes/node-a/release/")
    assert response.status_code == 409 and "cancel it" in response.json()["detail"]
    assert not Run.objects.get(pk=cluster["mine"].pk).pending_release and settled == []


def test_only_staff_release_and_unknown_nodes_are_404(owner_client, staff_client, cluster):
    ended(cluster["mine"])
    assert owner_client.post("/api/nodes/node-a/release/").status_code == 403
    assert not Run.objects.get(pk=cluster["mine"].pk).pending_release
    assert staff_client.post("/api/nodes/node-z/release/").status_code == 404
    assert staff_client.post("/api/nodes/node-b/release/").status_code == 409


@pytest.mark.parametrize("pods", [1, 200])
def test_machines_take_one_query_however_many_pods(
    staff_client, backend, owner, pods, django_assert_max_num_queries
):
    backend.add_node("node-a", cores=1000, memory_gb=4000)
    runs = [running(submitted(owner)) for _ in range(min(pods, 5))]
    backend.set_placements([pod(runs[i % len(runs)], pod=f"p{i}") for i in range(pods)])
    for path in ["/api/placements/", "/api/nodes/"]:
        with django_assert_max_num_queries(1):
            assert staff_client.get(path).status_code == 200
    assert len(staff_client.get("/api/placements/").json()) == pods
