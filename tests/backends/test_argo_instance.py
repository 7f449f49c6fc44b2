"""Argo's ``instanceID``: the runs' Workflows go to the controller configured with it, and the
service reads only those (``SIMRUN_ARGO_INSTANCE_ID``, docs/cluster.md)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig
from tests.backends.argo_runs import run_of
from tests.backends.argo_workflows import WF, Nodes, argo_pod, pod, workflow
from tests.backends.kube_api import INSTANCE_LABEL, KubeApiServer
from tests.polling import wait_for

OURS = ClusterConfig(namespace="simrun", queue="simrun", argo_instance_id="simrun-a")
NONE = ClusterConfig(namespace="simrun", queue="simrun")
SPEC = "tasks: {sweep: {type: squares, settings: {n: 100}, workers: 2}}"


def backend_of(kube: KubeApiServer, tmp_path: Path, cluster: ClusterConfig) -> ArgoBackend:
    return ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path, watch_timeout_s=5)


@pytest.fixture
def ours(kube: KubeApiServer, tmp_path: Path) -> Iterator[ArgoBackend]:
    backend = backend_of(kube, tmp_path, OURS)
    yield backend
    backend.close()


def submit(backend: ArgoBackend) -> str:
    record, plans = run_of(SPEC)
    return backend.submit(record, plans, task_types(), backend.cluster)


def test_a_workflow_is_labelled_with_the_instance_id_and_its_controller_runs_it(
    ours: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.argo_instance_id = "simrun-a"

    name = submit(ours)

    stored = kube.state.workflows[("simrun", name)]
    assert stored["metadata"]["labels"][INSTANCE_LABEL] == "simrun-a"
    made = kube.state.argo_creates_pods("simrun", name)
    assert made, "the controller of the instance runs it"
    assert {p["metadata"]["labels"][INSTANCE_LABEL] for p in made} == {"simrun-a"}
    assert {p.pod for p in ours.placements()} == {p["metadata"]["name"] for p in made}


@pytest.mark.parametrize(
    ("service", "controller"),
    [("", "simrun-a"), ("simrun-a", ""), ("simrun-a", "simrun-b")],
    ids=["unlabelled, instance controller", "labelled, plain controller", "another instance"],
)
def test_a_workflow_of_another_instance_is_never_run(
    kube: KubeApiServer, tmp_path: Path, service: str, controller: str
) -> None:
    cluster = OURS.model_copy(update={"argo_instance_id": service})
    backend = backend_of(kube, tmp_path, cluster)
    kube.state.argo_instance_id = controller

    name = submit(backend)

    assert kube.state.argo_creates_pods("simrun", name) == []
    assert backend.status(name).phase == "Pending"  # and so it stays: nothing times out


def test_a_plain_controller_runs_the_workflows_of_a_service_without_an_instance_id(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_of(kube, tmp_path, NONE)

    name = submit(backend)

    assert INSTANCE_LABEL not in kube.state.workflows[("simrun", name)]["metadata"]["labels"]
    assert kube.state.argo_creates_pods("simrun", name)


def others(label: str | None) -> dict:
    """A run's Workflow of another simrun, labelled with ``label`` as its instance."""
    other = workflow(Nodes())
    other["metadata"]["name"] = f"simrun-other{label or ''}"
    if label is not None:
        other["metadata"]["labels"][INSTANCE_LABEL] = label
    return other


@pytest.mark.parametrize("instance", ["simrun-a", ""], ids=["an instance", "none"])
def test_the_list_and_the_watch_hold_only_the_workflows_of_the_instance(
    kube: KubeApiServer, tmp_path: Path, instance: str
) -> None:
    backend = backend_of(kube, tmp_path, OURS.model_copy(update={"argo_instance_id": instance}))
    mine = workflow(Nodes())
    if instance:
        mine["metadata"]["labels"][INSTANCE_LABEL] = instance
    kube.state.put_workflow(copy.deepcopy(mine), "ADDED")
    kube.state.put_workflow(others("simrun-b"), "ADDED")
    names = [WF, "simrun-othersimrun-b", "simrun-other", "simrun-othersimrun-a"]
    wait_for(lambda: WF in backend.versions(names), 10, "the list")

    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Running")])
    changed = workflow(nodes)
    changed["metadata"]["labels"] = mine["metadata"]["labels"]
    kube.state.put_workflow(changed)
    kube.state.put_workflow(others(None if instance else "simrun-a"))
    version = kube.state.workflows[("simrun", WF)]["metadata"]["resourceVersion"]
    wait_for(lambda: backend.versions(names).get(WF) == version, 10, "the watch")

    assert set(backend.versions(names)) == {WF}
    asked = {r.query.get("labelSelector") for r in kube.state.requests if "workflows" in r.path}
    term = f"{INSTANCE_LABEL}={instance}" if instance else f"!{INSTANCE_LABEL}"
    assert asked == {f"simrun/run,{term}"}


def test_placements_are_the_pods_of_the_instance(ours: ArgoBackend, kube: KubeApiServer) -> None:
    for name, label in [("p-ours", "simrun-a"), ("p-other", "simrun-b"), ("p-plain", None)]:
        made = argo_pod(name, node_name="sweep-w0(0)", phase="Running", host="node-a")
        if label:
            made["metadata"]["labels"][INSTANCE_LABEL] = label
        kube.state.put_pod(made)

    assert [p.pod for p in ours.placements()] == ["p-ours"]


def test_an_instance_id_that_is_no_label_value_is_refused_in_the_configuration() -> None:
    with pytest.raises(pydantic.ValidationError):
        ClusterConfig(argo_instance_id="simrun a/b")
    with pytest.raises(pydantic.ValidationError):
        ClusterConfig(argo_instance_id="x" * 64)


def test_the_setting_reaches_the_cluster_configuration(settings) -> None:
    from runs.backends import cluster_config

    settings.SIMRUN_CLUSTER = {**settings.SIMRUN_CLUSTER, "argo_instance_id": "simrun-ci"}

    assert cluster_config().argo_instance_id == "simrun-ci"
