"""The runs' pods read from one list and a watch (``pod_cache``): a page view or a pass costs
the API server nothing that grows with the pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.pod_cache import PAGE_SIZE, PodsUnknown, slim
from runs.backends.base import ClusterConfig
from tests.backends.argo_workflows import WF, Nodes, argo_pod, pod, workflow
from tests.backends.kube_api import KubeApiServer
from tests.backends.kube_fixtures import asked, pods_seen
from tests.polling import wait_for

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
VIEWS = 5


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> Iterator[ArgoBackend]:
    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path, watch_timeout_s=5, reasons_ttl_s=0
    )
    yield backend
    backend.close()


def a_sweep_waiting(kube: KubeApiServer, pods: int) -> None:
    """A run's Workflow whose extra workers wait, each with its pod."""
    nodes = Nodes()
    children = {f"({n}:{n})": ("Pending", [pod("Pending")]) for n in range(1, pods + 1)}
    nodes.fan_out("sweep-extra", "Running", children)
    kube.state.put_workflow(workflow(nodes), "ADDED")
    for n in range(1, pods + 1):
        kube.state.put_pod(
            argo_pod(
                f"p{n:04d}",
                node_name=f"sweep-extra({n}:{n})(0)",
                phase="Pending",
                dag_task="sweep-extra",
                worker=f"sweep-w{n}",
            )
        )


@pytest.mark.parametrize("pods", [10, 300])
def test_page_views_and_statuses_ask_nothing_of_the_api_server_however_many_pods(
    backend: ArgoBackend, kube: KubeApiServer, pods: int
) -> None:
    a_sweep_waiting(kube, pods)
    wait_for(lambda: WF in backend.versions([WF]), 10, "the workflows' list")
    assert len(backend.placements()) == pods  # the first read of the process lists them
    kube.state.requests.clear()

    for _ in range(VIEWS):
        placements = backend.placements()
        status = backend.status(WF)

    assert len(placements) == pods
    assert status.waiting, "the reasons of the waiting pods were read"
    assert asked(kube) == [], "no request, whatever the pods"


def test_the_first_read_lists_the_pods_a_page_at_a_time_and_then_only_watches(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    for n in range(1_001):
        kube.state.put_pod(
            argo_pod(f"p{n:04d}", node_name=f"sweep-extra({n}:{n})(0)", phase="Pending")
        )

    for _ in range(VIEWS):
        assert len(backend.placements()) == 1_001

    lists = [r for r in asked(kube) if r.path.endswith("/pods")]
    assert [r.query.get("limit") for r in lists] == [str(PAGE_SIZE)] * 3
    assert all(r.sent < 1_000_000 for r in lists), "no answer grows with the pods"
    watches = [r for r in kube.state.requests if r.query.get("watch") == "true"]
    assert [r.path for r in watches] == ["/api/v1/namespaces/simrun/pods"]
    assert watches[0].query["labelSelector"] == lists[0].query["labelSelector"]


def test_the_cache_follows_pods_made_changed_and_deleted(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_pod(argo_pod("p-a", node_name="sweep-w0(0)", phase="Running"))
    assert [p.pod for p in backend.placements()] == ["p-a"]

    kube.state.put_pod(argo_pod("p-b", node_name="sweep-w1(0)", phase="Pending"))
    kube.state.pods[("simrun", "p-a")]["status"]["phase"] = "Succeeded"  # the kubelet's write
    pods_seen(backend, kube)
    assert [p.pod for p in backend.placements()] == ["p-b"]

    del kube.state.pods[("simrun", "p-b")]
    pods_seen(backend, kube)
    assert backend.placements() == []
    assert not [r for r in asked(kube) if r.path.endswith("/pods") and r.query.get("continue")]


def test_the_logs_of_a_task_list_no_pods(backend: ArgoBackend, kube: KubeApiServer) -> None:
    kube.state.put_pod(argo_pod("p-a", node_name="sweep-w0(0)", phase="Running"), log="a\n")
    backend.logs(WF, "sweep")
    kube.state.requests.clear()

    [entry] = backend.logs(WF, "sweep")

    assert entry.text == "a\n"
    assert [r.path for r in asked(kube)] == ["/api/v1/namespaces/simrun/pods/p-a/log"]


def test_a_pod_is_kept_with_only_the_fields_simrun_reads() -> None:
    made: dict[str, Any] = argo_pod("p-a", node_name="sweep-w0(0)", phase="Pending", host="n-1")
    made["spec"]["volumes"] = [{"name": "store", "persistentVolumeClaim": {"claimName": "s"}}]
    made["spec"]["containers"][1]["env"].append({"name": "SECRET_TOKEN", "value": "x" * 4096})
    made["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied"] = "x" * 4096
    made["metadata"]["uid"] = "u-1"

    kept = slim(made)

    assert "volumes" not in kept["spec"]
    main = kept["spec"]["containers"][1]
    assert [e["name"] for e in main["env"]] == ["SIMRUN_ATTEMPT", "SIMRUN_WORKER"]
    assert set(main) == {"name", "resources", "env"}
    assert kept["metadata"]["annotations"] == {
        "workflows.argoproj.io/node-name": f"{WF}.sweep-w0(0)"
    }
    assert kept["metadata"]["uid"] == "u-1"
    assert kept["spec"]["nodeName"] == "n-1"
    assert kept["status"] == made["status"]
    assert len(repr(kept)) < len(repr(made)) / 4


def test_pods_that_cannot_be_listed_are_unknown_not_empty(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_pod(argo_pod("p-a", node_name="sweep-w0(0)", phase="Running"))
    kube.state.intercept = lambda request: 403 if request.path.endswith("/pods") else None

    with pytest.raises(PodsUnknown):
        backend.placements()
