"""The Kueue Workloads of the runs' pods read from one list and a watch (``workload_cache``):
the reasons of a status cost the API server nothing that grows with the pods Kueue holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.workload_cache import PAGE_SIZE, slim
from runs.backends.base import ClusterConfig
from tests.backends.argo_workflows import WF, Nodes, gated_pod, pod, workflow, workload
from tests.backends.kube_api import KubeApiServer
from tests.backends.kube_fixtures import asked
from tests.polling import wait_for

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
VIEWS = 5
NO_QUOTA = [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "full"}]


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> Iterator[ArgoBackend]:
    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path, watch_timeout_s=5, reasons_ttl_s=0
    )
    yield backend
    backend.close()


def a_sweep_held_by_kueue(kube: KubeApiServer, pods: int) -> None:
    """A run's Workflow whose extra workers Kueue holds back, each pod with its Workload."""
    nodes = Nodes()
    children = {f"({n}:{n})": ("Pending", [pod("Pending")]) for n in range(1, pods + 1)}
    nodes.fan_out("sweep-extra", "Running", children)
    kube.state.put_workflow(workflow(nodes), "ADDED")
    for n in range(1, pods + 1):
        name = f"p{n:04d}"
        kube.state.put_pod(gated_pod(name, f"sweep-extra({n}:{n})(0)", f"uid-{n}"))
        kube.state.workloads[("simrun", f"pod-{name}")] = workload(name, f"uid-{n}", NO_QUOTA)


@pytest.mark.parametrize("pods", [10, 600])
def test_the_reasons_of_pods_kueue_holds_ask_nothing_of_the_api_server_however_many(
    backend: ArgoBackend, kube: KubeApiServer, pods: int
) -> None:
    a_sweep_held_by_kueue(kube, pods)
    wait_for(lambda: WF in backend.versions([WF]), 10, "the workflows' list")
    assert len(backend.status(WF).waiting) == pods  # the first read of the process lists them
    lists = [r for r in asked(kube) if r.path.endswith("/workloads")]
    assert [r.query.get("limit") for r in lists] == [str(PAGE_SIZE)] * (1 + pods // PAGE_SIZE)
    kube.state.requests.clear()

    for _ in range(VIEWS):
        status = backend.status(WF)

    assert set(status.waiting.values()) == {"waiting for quota in Kueue: full"}
    assert asked(kube) == [], "no request, whatever the pods"


def test_the_cache_follows_a_workload_kueue_admits(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    a_sweep_held_by_kueue(kube, 2)
    wait_for(lambda: WF in backend.versions([WF]), 10, "the workflows' list")
    assert backend.status(WF).waiting["sweep-extra(1:1)"] == "waiting for quota in Kueue: full"

    admitted = {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z"}
    kube.state.workloads[("simrun", "pod-p0001")]["status"]["conditions"] = [admitted]
    heard = backend.workloads.get
    wait_for(lambda: heard("pod-p0001-4f1c2")["status"]["conditions"] == [admitted], 10, "it")

    waiting = backend.status(WF).waiting
    assert waiting["sweep-extra(1:1)"] == "admitted by Kueue, waiting to be scheduled"
    assert waiting["sweep-extra(2:2)"] == "waiting for quota in Kueue: full"
    watches = [r for r in kube.state.requests if r.query.get("watch") == "true"]
    assert "/apis/kueue.x-k8s.io/v1beta2/namespaces/simrun/workloads" in {r.path for r in watches}


def test_a_workload_is_kept_with_only_what_the_reasons_read() -> None:
    made: dict[str, Any] = workload("p1", "uid-1", NO_QUOTA)
    made["spec"]["podSets"][0]["template"] = {"spec": {"containers": [{"name": "x" * 4096}]}}

    kept = slim(made)

    assert kept["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": "uid-1"}
    assert kept["status"] == made["status"]
    assert "spec" not in kept
