"""Kueue's cohorts as its docs define them ("Cohort", "Cluster Queue"), in the stand-in that
admits the runs' pods: a Cohort object's quota shared by its tree, a ClusterQueue's
``lendingLimit`` keeping the rest of its quota for itself, and the webhook's rules on both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig
from tests.backends.argo_runs import run_of
from tests.backends.argo_workflows import WF
from tests.backends.kube_api import KubeApiServer

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
FLAVOR = "simrun-flavor"


def quota(cores: Any, **limits: Any) -> dict[str, Any]:
    """One flavor's resources: ``cores`` (with ``limits`` on them), memory and disk enough."""
    return {
        "name": FLAVOR,
        "resources": [
            {"name": "cpu", "nominalQuota": cores, **limits},
            {"name": "memory", "nominalQuota": "512Gi"},
            {"name": "ephemeral-storage", "nominalQuota": "1Ti"},
        ],
    }


def in_cohort(kube: KubeApiServer, cohort: str, cores: Any, **limits: Any) -> None:
    """The runs' ClusterQueue in ``cohort`` with ``cores`` of its own."""
    spec = kube.state.cluster_queues["simrun"]["spec"]
    spec["cohortName"] = cohort
    [group] = spec["resourceGroups"]
    group["flavors"] = [quota(cores, **limits)]


def other_queue(kube: KubeApiServer, cohort: str, cores: Any, **limits: Any) -> dict[str, Any]:
    """Another team's ClusterQueue in ``cohort``."""
    other = json.loads(json.dumps(kube.state.cluster_queues["simrun"]))
    other["metadata"]["name"] = "other"
    other["spec"]["cohortName"] = cohort
    other["spec"]["resourceGroups"][0]["flavors"] = [quota(cores, **limits)]
    return other


def cohort(
    name: str, cores: int = 0, *, parent: str = "", version: str = "v1beta2", **limits: Any
) -> dict[str, Any]:
    """A Cohort of ``cores`` of its own (with ``limits`` on them), under ``parent``."""
    spec: dict[str, Any] = {"parentName": parent} if parent else {}
    if cores or limits:
        resources = [{"name": "cpu", "nominalQuota": cores, **limits}]
        flavors = [{"name": FLAVOR, "resources": resources}]
        spec["resourceGroups"] = [{"coveredResources": ["cpu"], "flavors": flavors}]
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": spec,
    }


def create(kube: KubeApiServer, obj: dict[str, Any], plural: str) -> None:
    group, version = obj["apiVersion"].split("/")
    CustomObjectsApi(kube.client("cluster-admin")).create_cluster_custom_object(
        group, version, plural, obj
    )


def submitted_pod(kube: KubeApiServer, tmp_path: Path, cores: int) -> dict[str, Any]:
    """The pod of a one-task run of ``cores`` cores, as Kueue left it."""
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)
    record, plans = run_of(f"tasks: {{solve: {{command: [solve], cores: {cores}}}}}")
    backend.submit(record, plans, task_types(), CLUSTER)
    [first] = kube.state.argo_creates_pods("simrun", WF)
    return kube.state.pods[("simrun", first["metadata"]["name"])]


def waiting_for(kube: KubeApiServer) -> str:
    [workload] = kube.state.workloads.values()
    conditions = {c["type"]: c for c in workload["status"]["conditions"]}
    return conditions["QuotaReserved"]["message"] if "QuotaReserved" in conditions else ""


@pytest.mark.parametrize("parent", ["", "org"], ids=["cohort", "parent-cohort"])
def test_a_queue_without_quota_of_its_own_borrows_its_cohort_trees_quota(
    kube: KubeApiServer, tmp_path: Path, parent: str
) -> None:
    """A Cohort's nominal quota is shared by the ClusterQueues of its tree ("Cohort": it must
    list the flavor and resource, even with a nominal quota of 0)."""
    in_cohort(kube, "lab", 0)
    if parent:
        create(kube, cohort("org", 16), "cohorts")
        create(kube, cohort("lab", parent="org"), "cohorts")
    else:
        create(kube, cohort("lab", 16), "cohorts")

    pod = submitted_pod(kube, tmp_path, 8)

    assert not pod["spec"].get("schedulingGates"), waiting_for(kube)


def test_a_queue_borrows_no_more_than_the_others_lending_limit(
    kube: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other ClusterQueue keeps ``nominalQuota - lendingLimit`` for itself: of its 64
    cores 4 may be lent, so a 16-core pod beside our 8 waits in Kueue, with Kueue's reason."""
    in_cohort(kube, "lab", 8)
    create(kube, other_queue(kube, "lab", 64, lendingLimit=4), "clusterqueues")
    # Kueue's own doing (simrun's check, which refuses such a task, left out to show it).
    monkeypatch.setattr("runs.backends.argo.capacity.admits", lambda groups, requests: True)

    pod = submitted_pod(kube, tmp_path, 16)

    assert pod["spec"].get("schedulingGates")
    assert "insufficient unused quota for cpu in flavor simrun-flavor" in waiting_for(kube)


def test_a_queue_borrows_within_the_others_lending_limit(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    in_cohort(kube, "lab", 8)
    create(kube, other_queue(kube, "lab", 64, lendingLimit=12), "clusterqueues")

    pod = submitted_pod(kube, tmp_path, 16)

    assert not pod["spec"].get("schedulingGates"), waiting_for(kube)


@pytest.mark.parametrize(
    ("cohort_name", "limits", "message"),
    [
        ("", {"lendingLimit": 4}, "lendingLimit: must be nil when cohort is empty"),
        ("", {"borrowingLimit": 4}, "borrowingLimit: must be nil when cohort is empty"),
        ("lab", {"lendingLimit": 65}, "must be less than or equal to the nominalQuota"),
    ],
    ids=["lending-alone", "borrowing-alone", "lending-past-nominal"],
)
def test_kueues_webhook_refuses_limits_it_cannot_apply(
    kube: KubeApiServer, cohort_name: str, limits: dict[str, int], message: str
) -> None:
    queue = other_queue(kube, cohort_name, 64, **limits)
    if not cohort_name:
        del queue["spec"]["cohortName"]

    with pytest.raises(ApiException) as refused:
        create(kube, queue, "clusterqueues")

    assert refused.value.status == 422
    assert message in json.loads(refused.value.body)["message"]
    assert "other" not in kube.state.cluster_queues


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_a_cohort_is_held_to_kueues_schema_at_both_versions(
    kube: KubeApiServer, version: str
) -> None:
    create(kube, cohort("org", 16, version=version), "cohorts")
    create(kube, cohort("lab", parent="org", version=version), "cohorts")
    old = cohort("old", version=version)
    old["spec"] = {"parent": "org"}  # the field of v1alpha1

    with pytest.raises(ApiException) as refused:
        create(kube, old, "cohorts")

    assert refused.value.status == 422
    assert set(kube.state.cohorts) == {"org", "lab"}


def test_in_a_cohort_a_task_more_than_its_tree_could_ever_lend_is_refused_at_submission(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    """Without a ``borrowingLimit`` the queue may borrow all its tree lends, and no more: of
    the other queue's 64 cores 4 may be lent, so a task of 16 cores beside our 8 would wait in
    Kueue forever; it is refused, naming what the queue's flavor gives one pod."""
    in_cohort(kube, "lab", 8)
    create(kube, other_queue(kube, "lab", 64, lendingLimit=4), "clusterqueues")
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)
    record, plans = run_of("tasks: {solve: {command: [solve], cores: 16}}")

    with pytest.raises(ValueError, match=r"in any of its flavors .*12 cores"):
        backend.submit(record, plans, task_types(), CLUSTER)

    assert kube.state.workflows == {}
    assert backend.capacity.max_cores == 11, "12 cores a pod, Argo's wait beside its main"


def test_in_a_cohort_the_cohorts_own_quota_is_what_may_be_borrowed(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    in_cohort(kube, "lab", 0)
    create(kube, cohort("org", 16), "cohorts")
    create(kube, cohort("lab", parent="org"), "cohorts")
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)

    assert backend.capacity.max_cores == 15, "the tree's 16 cores, beside Argo's wait"


def test_a_cohort_that_cannot_be_read_leaves_the_borrowing_to_kueue(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    """A Role without the lists of ClusterQueues and Cohorts, or a Kueue without the Cohort
    API, leaves no cap known for what the queue borrows: the task goes to Kueue."""
    in_cohort(kube, "lab", 8)
    kube.state.intercept = lambda r: 403 if r.path.endswith("/cohorts") else None
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)
    record, plans = run_of("tasks: {solve: {command: [solve], cores: 16}}")

    backend.submit(record, plans, task_types(), CLUSTER)

    assert kube.state.workflows


def test_a_cohorts_borrowing_limit_caps_what_its_queues_take_of_its_parents_quota(
    kube: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of the 16 cores of "org", its child "lab" may borrow 4 (its ``borrowingLimit``): a pod
    of our queue in "lab" gets 4 at most, so a task of 8 is refused at submission, and Kueue
    (the check left out) holds its pod."""
    in_cohort(kube, "lab", 0)
    create(kube, cohort("org", 16), "cohorts")
    create(kube, cohort("lab", parent="org", borrowingLimit=4), "cohorts")
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)
    record, plans = run_of("tasks: {solve: {command: [solve], cores: 8}}")

    assert backend.capacity.max_cores == 3, "4 cores a pod, Argo's wait beside its main"
    with pytest.raises(ValueError, match=r"in any of its flavors .*4 cores"):
        backend.submit(record, plans, task_types(), CLUSTER)
    monkeypatch.setattr("runs.backends.argo.capacity.admits", lambda groups, requests: True)
    assert submitted_pod(kube, tmp_path, 8)["spec"].get("schedulingGates"), "held by Kueue"


def test_a_cohorts_lending_limit_keeps_the_rest_of_its_quota_from_its_parent(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    """ "team" lends "org" 6 of its 16 cores: our queue, in "lab" beside it under "org", may
    have 6."""
    in_cohort(kube, "lab", 0)
    create(kube, cohort("org"), "cohorts")
    create(kube, cohort("lab", parent="org"), "cohorts")
    create(kube, cohort("team", 16, parent="org", lendingLimit=6), "cohorts")
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)

    assert backend.capacity.max_cores == 5, "6 cores a pod, Argo's wait beside its main"
    assert not submitted_pod(kube, tmp_path, 5)["spec"].get("schedulingGates"), waiting_for(kube)
