"""A run past what Argo and etcd hold is refused at its submission, naming the limit, and
never POSTed; the API server's "too large" answers are final, not tried again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.tasktypes import task_types
from runs.backends.argo.api import CallPolicy, ClusterApiError
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import BackendUnavailable, ClusterConfig, RunRecord, TaskPlan
from tests.backends.argo_runs import run_of
from tests.backends.kube_api import KubeApiServer

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> Iterator[ArgoBackend]:
    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path, calls=CallPolicy(backoff_s=0.01)
    )
    yield backend
    backend.close()


def commands(count: int, argument: str = "x") -> tuple[RunRecord, dict[str, TaskPlan]]:
    """A run of ``count`` independent command tasks, each echoing ``argument`` (past what a
    spec document may hold: the spec's own limit is not the one tested)."""
    tasks = {f"t{i}": {"command": ["echo", "x"]} for i in range(count)}
    record, plans = run_of(yaml.safe_dump({"tasks": tasks}))
    long = {
        k: t.model_copy(update={"command": ["echo", argument]}) for k, t in record.tasks.items()
    }
    return record.model_copy(update={"tasks": long}), plans


def posts(kube: KubeApiServer) -> list[int]:
    return [r.status for r in kube.state.requests if r.method == "POST"]


def test_a_run_past_the_crds_200_templates_is_refused_naming_the_limit_and_never_posted(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    record, plans = commands(201)

    with pytest.raises(ValueError, match=r"202 Argo templates, more than the 200 .*CRD"):
        backend.submit(record, plans, task_types(), CLUSTER)

    assert posts(kube) == []


def test_a_workflow_past_1_mib_is_refused_naming_the_limit_and_never_posted(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    record, plans = commands(100, "y" * 12_000)

    with pytest.raises(ValueError, match=r"would be 1\.\d\d MiB, more than the 1 MiB"):
        backend.submit(record, plans, task_types(), CLUSTER)

    assert posts(kube) == []


@pytest.mark.parametrize(
    ("argument_bytes", "status"), [(18_000, 500), (34_000, 413)], ids=["etcd", "api-server"]
)
def test_the_api_servers_too_large_answers_are_final_not_tried_again(
    backend: ArgoBackend,
    kube: KubeApiServer,
    monkeypatch: pytest.MonkeyPatch,
    argument_bytes: int,
    status: int,
) -> None:
    monkeypatch.setattr("runs.backends.argo.workflow_limits.WORKFLOW_BYTES_MAX", 8 << 20)
    record, plans = commands(100, "z" * argument_bytes)

    with pytest.raises(ClusterApiError) as refused:
        backend.submit(record, plans, task_types(), CLUSTER)

    assert not isinstance(refused.value, BackendUnavailable)
    assert refused.value.status == status
    assert posts(kube) == [status], "one POST: the same body is refused each time"


@pytest.mark.django_db
def test_a_submission_past_the_limits_is_a_400_naming_it_and_no_run(
    backend: ArgoBackend, kube: KubeApiServer, owner, settings
) -> None:
    from runs.models import Run
    from runs.planning.spec import SpecError
    from runs.planning.spec_document import parse_spec
    from runs.planning.submission import create_run

    settings.SIMRUN_CLUSTER = {"namespace": "simrun", "queue": "simrun"}
    tasks = {f"t{i}": {"command": ["echo", "x"]} for i in range(201)}
    spec = parse_spec(yaml.safe_dump({"tasks": tasks}), types=task_types())

    with pytest.raises(SpecError) as refused:
        create_run(spec=spec, owner=owner, backend=backend, schedule=lambda run_id: None)

    assert "more than the 200 Argo's Workflow CRD allows" in " ".join(refused.value.errors["tasks"])
    assert posts(kube) == [] and not Run.objects.exists()
