"""The Argo backend checks the cluster's Argo and Kueue when its control loop starts and before
it submits, and the ClusterQueue's quota: what it cannot run on is said at start and refused
at submission, naming what it found, what it needs and the doc."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.versions import argo_refusal, image_version
from runs.backends.base import ClusterConfig
from tests.backends.argo_runs import run_of
from tests.backends.kube_api import KubeApiServer
from tests.polling import wait_for

CLUSTER = ClusterConfig()
SPEC = "tasks: {sweep: {type: squares, settings: {n: 100}, workers: 2, cores: 8}}"


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> ArgoBackend:
    return ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)


def submit(backend: ArgoBackend, spec: str = SPEC) -> str:
    record, plans = run_of(spec)
    return backend.submit(record, plans, task_types(), CLUSTER)


def workflow_posts(kube: KubeApiServer) -> list[int]:
    return [r.status for r in kube.state.requests if r.method == "POST"]


def test_argo_3_6_is_refused_naming_what_it_found_what_it_needs_and_the_doc(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.argo_version = "v3.6.5"

    with pytest.raises(ValueError) as raised:
        submit(backend)

    message = str(raised.value)
    assert message.startswith("the cluster runs Argo Workflows 3.6; simrun needs 3.7 or later")
    assert "Error applying PodSpecPatch" in message
    assert "docs/cluster.md (Supported versions)" in message
    assert workflow_posts(kube) == []


def test_a_kueue_serving_v1beta1_only_is_refused(backend: ArgoBackend, kube: KubeApiServer) -> None:
    kube.state.kueue_versions = ["v1beta1"]

    with pytest.raises(ValueError) as raised:
        submit(backend)

    assert str(raised.value) == (
        "the cluster's Kueue serves kueue.x-k8s.io v1beta1 only; simrun needs v1beta2 (Kueue "
        "0.15 or later), see docs/cluster.md (Supported versions)"
    )
    assert workflow_posts(kube) == []


def start(backend: ArgoBackend, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Start the backend as the Celery worker does (``subscribe``); the records of its check."""
    caplog.set_level(logging.INFO, logger="runs.backends.argo.backend")

    def said() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "docs/cluster.md" in r.getMessage()]

    try:
        backend.subscribe(lambda: None)
        wait_for(said, 10, "the check at start")
    finally:
        backend.close()
    return said()


def test_argo_3_6_and_a_kueue_serving_v1beta1_only_are_said_when_the_worker_starts(
    backend: ArgoBackend, kube: KubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    kube.state.argo_version = "v3.6.5"
    kube.state.kueue_versions = ["v1beta1"]

    argo, kueue = start(backend, caplog)

    assert (argo.levelno, kueue.levelno) == (logging.ERROR, logging.ERROR)
    assert argo.getMessage().startswith(
        "the cluster runs Argo Workflows 3.6; simrun needs 3.7 or later"
    )
    assert argo.getMessage().endswith(
        "see docs/cluster.md (Supported versions): every run will fail at its submission "
        "until this is fixed"
    )
    assert kueue.getMessage().startswith(
        "the cluster's Kueue serves kueue.x-k8s.io v1beta1 only; simrun needs v1beta2 (Kueue "
        "0.15 or later), see docs/cluster.md (Supported versions)"
    )
    assert workflow_posts(kube) == []


def test_a_supported_cluster_is_said_when_the_worker_starts_with_what_was_found(
    backend: ArgoBackend, kube: KubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    [record] = start(backend, caplog)

    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "the cluster runs Argo Workflows 4.1 and its Kueue serves kueue.x-k8s.io v1beta2, "
        "v1beta1: simrun needs Argo 3.7 or later and v1beta2, see docs/cluster.md (Supported "
        "versions)"
    )


def test_a_cluster_that_cannot_be_asked_at_start_is_checked_at_each_submission(
    backend: ArgoBackend, kube: KubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    kube.state.intercept = lambda r: 403 if r.path.strip("/") == "apis" else None

    [record] = start(backend, caplog)

    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("cannot check the versions of Argo and Kueue now (")
    assert record.getMessage().endswith(
        "they are checked before each submission, see docs/cluster.md (Supported versions)"
    )


def test_a_cluster_without_kueue_is_refused(backend: ArgoBackend, kube: KubeApiServer) -> None:
    kube.state.kueue_versions = []

    with pytest.raises(ValueError, match="serves no kueue.x-k8s.io API"):
        submit(backend)


def test_argo_3_7_and_kueue_serving_both_versions_run(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.argo_version = "v3.7.0"

    assert submit(backend) == "simrun-abc123def0"
    assert workflow_posts(kube) == [201]


def test_a_stated_version_stands_for_a_controller_that_cannot_be_read(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    kube.state.argo_version = "latest"  # no version in the tag
    unknown = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)
    with pytest.raises(ValueError, match=r"unknown \(quay.io/argoproj/workflow-controller:latest"):
        submit(unknown)

    stated = CLUSTER.model_copy(update={"argo_version": "3.7"})
    backend = ArgoBackend(cluster=stated, api=kube.client(), store=tmp_path)
    assert submit(backend)


def test_the_cluster_is_asked_once_per_capacity_period(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    submit(backend)
    submit(backend)

    reads = [
        r.path
        for r in kube.state.requests
        if "deployments" in r.path or r.path.strip("/") == "apis"
    ]
    assert len(reads) == 2


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("quay.io/argoproj/workflow-controller:v3.6.5", (3, 6)),
        ("quay.io/argoproj/workflow-controller:v4.1.2@sha256:ab12", (4, 1)),
        ("registry:5000/argo/workflow-controller:v3.7.0-rc1", (3, 7)),
        ("quay.io/argoproj/workflow-controller:latest", None),
        ("quay.io/argoproj/workflow-controller@sha256:ab12", None),
    ],
)
def test_the_version_is_the_tag_of_the_controllers_image(
    image: str, version: tuple[int, int] | None
) -> None:
    assert image_version(image) == version
    assert (argo_refusal(image) == "") is (version is not None and version >= (3, 7))


def test_a_task_larger_than_the_cluster_queues_quota_is_refused_at_submission(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    [quota] = kube.state.cluster_queues["simrun"]["spec"]["resourceGroups"]
    quota["flavors"][0]["resources"][0]["nominalQuota"] = 4  # cores

    with pytest.raises(ValueError) as raised:
        submit(backend)

    message = str(raised.value)
    assert message.startswith("task sweep needs 8 cores, ")
    assert message.endswith(
        "more than the ClusterQueue of the LocalQueue simrun admits for one pod in any of its "
        "flavors (at most, flavor by flavor: 4 cores, 128.0 GiB, 1024 GiB of scratch): Kueue "
        "would hold it forever"
    )
    assert workflow_posts(kube) == []


def test_a_cluster_queue_that_does_not_cover_ephemeral_storage_is_refused(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    [group] = kube.state.cluster_queues["simrun"]["spec"]["resourceGroups"]
    group["coveredResources"] = ["cpu", "memory"]
    group["flavors"][0]["resources"] = group["flavors"][0]["resources"][:2]

    with pytest.raises(ValueError, match="does not cover ephemeral-storage"):
        submit(backend)
