"""The Argo backend's status cache (runs/backends/argo/watch.py): it lists the workflows once,
then follows their watch, so statuses cost no request; against a Kubernetes API on loopback,
with the real ``kubernetes`` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from runs.backends.argo.backend import METADATA_LIST, ArgoBackend
from runs.backends.base import ClusterConfig
from tests.backends.argo_workflows import WF, Nodes, argo_pod, pod, workflow
from tests.backends.kube_api import KubeApiServer, Request
from tests.polling import wait_for

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
WORKFLOWS = "/apis/argoproj.io/v1alpha1/namespaces/simrun/workflows"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> Iterator[ArgoBackend]:
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path, watch_timeout_s=5)
    yield backend
    backend.close()


def named(name: str, phase: str = "Running", sweep: str = "Running") -> dict[str, Any]:
    """The Workflow of a run named ``name`` whose coordinator is in phase ``sweep``."""
    nodes = Nodes(phase)
    nodes.task("sweep-w0", sweep, [pod(sweep)])
    return json.loads(json.dumps(workflow(nodes, phase)).replace(WF, name))


def names(count: int) -> list[str]:
    return [f"simrun-run{i:05d}" for i in range(count)]


def lists(kube: KubeApiServer) -> list[Request]:
    return [
        r
        for r in kube.state.requests
        if r.method == "GET" and r.path == WORKFLOWS and r.query.get("watch") != "true"
    ]


def full_lists(kube: KubeApiServer) -> list[Request]:
    """The lists of whole Workflows (the cache's), not of their metadata alone."""
    return [r for r in lists(kube) if "PartialObjectMetadataList" not in r.accept]


def watches(kube: KubeApiServer) -> list[Request]:
    return [r for r in kube.state.requests if r.query.get("watch") == "true"]


def per_workflow(kube: KubeApiServer) -> list[Request]:
    """Requests about one workflow or its pods: a GET of it, a list of its pods."""
    return [
        r
        for r in kube.state.requests
        if r.path.startswith(f"{WORKFLOWS}/") or r.path.endswith("/pods")
    ]


def synced(backend: ArgoBackend, wanted: list[str]) -> dict[str, str]:
    """The versions of the wanted workflows, once the status cache holds them all (before,
    ``versions`` may answer them from a list of their metadata alone)."""
    backend.versions(wanted)  # starts the cache
    return wait_for(
        lambda: (found := backend._cache.versions(wanted)) and len(found) == len(wanted) and found,
        10,
        "the status cache to hold every workflow",
    )


def test_statuses_of_many_workflows_come_from_one_list_and_the_watch(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    wanted = names(50)
    for name in wanted:
        kube.state.put_workflow(named(name), "ADDED")

    synced(backend, wanted)
    for _ in range(3):  # three steady passes
        assert backend.versions(wanted).keys() == set(wanted)
        assert all(backend.status(name).tasks == {"sweep-w0": "Running"} for name in wanted)

    assert per_workflow(kube) == []
    assert len(lists(kube)) == 1 and lists(kube)[0].query["limit"] == "50"
    assert wait_for(lambda: watches(kube), 10, "the watch")[0].query["resourceVersion"]


def test_a_new_process_first_pass_reads_its_workflows_from_one_list_not_one_by_one(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    """A restarted service's first pass: ``versions`` waits for the cache's first list, so the
    runs whose rows hold their last poll are skipped and no Workflow is read by a GET."""
    wanted = names(20)
    for name in wanted:
        kube.state.put_workflow(named(name), "ADDED")

    assert backend.versions(wanted).keys() == set(wanted)  # at once, the first call

    assert all(backend.status(name).phase == "Running" for name in wanted)
    assert per_workflow(kube) == [] and len(lists(kube)) == 1


def test_a_first_list_of_many_pages_is_not_waited_for_the_versions_come_from_their_metadata(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    """A restarted service with more Workflows than a page: ``versions`` reads them from one
    list of their metadata (its pages answered as PartialObjectMetadataList), not from the
    cache's first list, whose second page fails here; a Workflow that changed is read by a
    GET, the rest are not read at all."""
    wanted = names(120)  # three pages of the cache's list
    for name in wanted:
        kube.state.put_workflow(named(name), "ADDED")

    def fail_the_second_page(request: Request) -> int | None:
        if "PartialObjectMetadataList" not in request.accept and request.query.get("continue"):
            return 500
        return None

    kube.state.intercept = fail_the_second_page
    versions = backend.versions(wanted)
    assert backend.status(wanted[0]).phase == "Running"
    kube.state.intercept = None
    assert versions == {
        name: kube.state.workflows[("simrun", name)]["metadata"]["resourceVersion"]
        for name in wanted
    }
    metadata = [r for r in lists(kube) if r not in full_lists(kube)]
    assert [r.status for r in metadata] == [200]
    assert [r.path for r in per_workflow(kube)] == [f"{WORKFLOWS}/{wanted[0]}"]


def test_the_metadata_of_a_list_is_all_the_server_answers_when_asked_so(
    kube: KubeApiServer,
) -> None:
    """The stand-in answers as the API server does: items of metadata alone, and 406 when no
    range of ``Accept`` can be served."""
    kube.state.put_workflow(named(WF), "ADDED")
    custom = CustomObjectsApi(kube.client())
    page = custom.list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", "simrun", "workflows", _headers={"Accept": METADATA_LIST}
    )
    assert page["kind"] == "PartialObjectMetadataList"
    assert [set(item) for item in page["items"]] == [{"kind", "apiVersion", "metadata"}]
    with pytest.raises(ApiException) as refused:
        custom.list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", "simrun", "workflows", _headers={"Accept": TABLE}
        )
    assert refused.value.status == 406


def test_a_change_the_watch_delivers_is_seen_with_a_new_version(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(named(WF), "ADDED")
    before = synced(backend, [WF])[WF]
    wait_for(lambda: watches(kube), 10, "the watch")

    kube.state.put_workflow(named(WF, "Succeeded", sweep="Succeeded"))

    wait_for(lambda: backend.versions([WF])[WF] != before, 10, "the change")
    status = backend.status(WF)
    assert status.phase == "Succeeded" and status.tasks == {"sweep-w0": "Succeeded"}
    assert per_workflow(kube) == [] and len(lists(kube)) == 1


def test_a_deleted_workflow_leaves_the_cache_and_is_unknown(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(named(WF), "ADDED")
    synced(backend, [WF])
    wait_for(lambda: watches(kube), 10, "the watch")

    kube.state.delete_workflow("simrun", WF)

    wait_for(lambda: not backend.versions([WF]), 10, "the deletion")
    with pytest.raises(KeyError):
        backend.status(WF)


def test_a_watch_too_old_for_the_server_lists_again(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(named(WF), "ADDED")
    gone = {"left": 1}

    def too_old(request: Request) -> int | None:
        if request.query.get("watch") == "true" and gone["left"]:
            gone["left"] -= 1
            # What the server missed while the watch was refused: the relist must bring it.
            kube.state.put_workflow(named(WF, "Succeeded", sweep="Succeeded"))
            return 410
        return None

    kube.state.intercept = too_old
    backend.versions([WF])  # starts the cache
    wait_for(lambda: len(lists(kube)) == 2, 10, "a second list after the 410")
    wait_for(lambda: backend.status(WF).phase == "Succeeded", 10, "the relisted status")
    assert [r.status for r in watches(kube)][0] == 410
    assert [r for r in per_workflow(kube) if r.method == "GET"] == []


def test_a_failed_watch_makes_the_cache_answer_nothing_until_it_listed_again(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path, watch_timeout_s=1, watch_backoff_s=0.2
    )
    failing = {"on": False}
    answered: list[dict[str, str]] = []

    def watch_fails(request: Request) -> int | None:
        if not failing["on"]:
            return None
        if request.query.get("watch") == "true":
            return 500
        if request.path == WORKFLOWS:  # the list after the failure
            answered.append(backend._cache.versions([WF]))
            failing["on"] = False
        return None

    try:
        kube.state.put_workflow(named(WF), "ADDED")
        synced(backend, [WF])
        kube.state.intercept = watch_fails
        failing["on"] = True  # the next watch (the server ends each within 1 s) fails
        wait_for(lambda: answered, 10, "a list after the failed watch")
        kube.state.put_workflow(named(WF, "Failed", sweep="Failed"))
        wait_for(lambda: backend.status(WF).phase == "Failed", 10, "the change")
    finally:
        backend.close()
    assert answered == [{}]  # nothing was answered from a cache no watch followed
    assert 500 in [r.status for r in watches(kube)]


def test_a_watch_the_server_ends_goes_on_from_its_version_without_a_list(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path, watch_timeout_s=1)
    try:
        kube.state.put_workflow(named(WF), "ADDED")
        before = synced(backend, [WF])[WF]
        wait_for(lambda: len(watches(kube)) >= 2, 10, "a second watch")
        kube.state.put_workflow(named(WF, "Failed", sweep="Failed"))
        wait_for(lambda: backend.versions([WF])[WF] != before, 10, "the change")
    finally:
        backend.close()
    assert len(lists(kube)) == 1
    assert all(r.query.get("resourceVersion") for r in watches(kube))


def test_a_workflow_the_cache_has_not_seen_is_read_by_a_get(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(named("simrun-other"), "ADDED")
    synced(backend, ["simrun-other"])
    new = named(WF)
    new["metadata"]["namespace"] = "simrun"
    with kube.state.lock:  # on the server, but not (yet) told to the watch
        kube.state.workflows[("simrun", WF)] = kube.state.stamp(new)

    assert backend.versions([WF]) == {}
    assert backend.status(WF).phase == "Running"
    assert [r.path for r in per_workflow(kube)] == [f"{WORKFLOWS}/{WF}"]


def test_the_reasons_of_pending_pods_are_read_once_per_version_of_the_workflow(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Pending", [pod("Pending")])
    kube.state.put_workflow(workflow(nodes), "ADDED")
    kube.state.put_pod(
        argo_pod("simrun-abc123def0-sweep-w0-1", node_name=f"{WF}.sweep-w0(0)", phase="Pending")
    )
    synced(backend, [WF])

    first = backend.status(WF)
    for _ in range(3):
        assert backend.status(WF) == first
    pod_lists = [
        r
        for r in kube.state.requests
        if r.path.endswith("/pods") and r.query.get("watch") != "true"
    ]
    assert len(pod_lists) == 1, "one list, then the cache's watch"
    assert first.tasks == {"sweep-w0": "Pending"}


def test_the_cache_lists_every_workflow_over_pages(
    backend: ArgoBackend, kube: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runs.backends.argo.backend.PAGE_SIZE", 2)
    wanted = names(5)
    for name in wanted:
        kube.state.put_workflow(named(name), "ADDED")

    synced(backend, wanted)

    pages = full_lists(kube)  # ``synced``'s reads list the versions alone meanwhile
    assert [r.query.get("continue") is None for r in pages] == [True, False, False]


def test_a_continue_token_that_expired_mid_list_lists_again_from_the_start(
    backend: ArgoBackend, kube: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runs.backends.argo.backend.PAGE_SIZE", 2)
    wanted = names(3)
    for name in wanted:
        kube.state.put_workflow(named(name), "ADDED")
    compacted: list[str] = []

    def compact_after_the_first_page(request: Request) -> None:
        if request.query.get("continue") and not compacted:
            kube.state.compact()  # etcd compacted between the two pages
            compacted.append(request.query["continue"])

    kube.state.intercept = compact_after_the_first_page

    synced(backend, wanted)

    assert [r.status for r in full_lists(kube)][:2] == [200, 410]


def test_a_compacted_watch_makes_the_cache_list_again_and_catch_up(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(named(WF), "ADDED")
    synced(backend, [WF])
    wait_for(lambda: watches(kube), 10, "the watch")
    kube.state.put_workflow(named(WF, "Succeeded", sweep="Succeeded"))
    kube.state.compact()
    kube.state.end_watches()  # its next watch starts from a version compacted away

    wait_for(lambda: len(lists(kube)) == 2, 15, "a list after the in-stream 410")
    assert backend.status(WF).phase == "Succeeded"


def test_bookmarks_carry_the_cache_forward_so_its_next_watch_starts_from_them(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.bookmark_s = 0.1
    kube.state.put_workflow(named(WF), "ADDED")
    synced(backend, [WF])
    [first] = wait_for(lambda: watches(kube), 10, "the watch")
    assert first.query["allowWatchBookmarks"] == "true"
    for _ in range(3):
        kube.state.version()  # other objects change: the bookmarks' version moves on
    target = kube.state.latest
    wait_for(lambda: max(kube.state.bookmarks_sent, default=0) >= target, 10, "a bookmark")
    kube.state.end_watches()

    second = wait_for(lambda: watches(kube)[1:], 10, "the next watch")[0]

    assert int(second.query["resourceVersion"]) >= target
    assert len(lists(kube)) == 1, "it watched on from the bookmark, without a list"
