"""A run past what Argo and etcd hold is refused at its submission, naming the limit, and
never POSTed; the API server's "too large" answers are final, not tried again. What a run
costs its Workflow grows by a few DAG tasks a task, not by templates: 500 tasks fit."""

from __future__ import annotations

import copy
import random
import re
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes.client import CustomObjectsApi

from harness.tasktypes import task_types
from runs.backends.argo.api import CallPolicy, ClusterApiError
from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.manifest import workflow_manifest
from runs.backends.argo.workflow_limits import (
    DAG_TASKS_MAX,
    WORKFLOW_BYTES_MAX,
    workflow_bytes,
    workflow_refusal,
)
from runs.backends.base import BackendUnavailable, ClusterConfig, RunRecord, TaskPlan
from tests.backends.argo_runs import run_of
from tests.backends.kube_api import ETCD_BYTES_MAX, KubeApiServer, argo_too_large

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
LETTERS = string.ascii_letters


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> Iterator[ArgoBackend]:
    # The stand-in validates each of the pods of a Workflow it is sent: a run of 500 split
    # tasks takes it past the default read timeout on a busy machine.
    calls = CallPolicy(backoff_s=0.01, read_timeout_s=120)
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path, calls=calls)
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


def tasks_of(kind: str, count: int) -> tuple[RunRecord, dict[str, TaskPlan]]:
    """A run of ``count`` independent command tasks or split tasks of four workers."""
    if kind == "command":
        return commands(count)
    tasks = {
        f"s{i}": {"type": "squares", "settings": {"n": 100}, "workers": 4} for i in range(count)
    }
    return run_of(yaml.safe_dump({"tasks": tasks}))


def posts(kube: KubeApiServer) -> list[int]:
    return [r.status for r in kube.state.requests if r.method == "POST"]


@pytest.mark.parametrize("kind", ["command", "split"])
def test_a_run_of_500_tasks_is_one_workflow_in_parts_of_200_dag_tasks_under_1_mib(
    backend: ArgoBackend, kube: KubeApiServer, kind: str
) -> None:
    record, plans = tasks_of(kind, 500)

    name = backend.submit(record, plans, task_types(), CLUSTER)

    stored = kube.state.workflows[("simrun", name)]
    templates = stored["spec"]["templates"]
    dags = [len(t["dag"]["tasks"]) for t in templates if "dag" in t]
    assert max(dags) <= DAG_TASKS_MAX
    assert len(templates) <= 12, "the kinds of pod and the parts, not one a task"
    assert workflow_bytes(stored) < WORKFLOW_BYTES_MAX
    assert posts(kube) == [201]
    assert kube.state.argo_creates_pods("simrun", name), "Argo's controller runs it"
    assert "status" not in stored, "not failed as past Argo's size (its MAX_WORKFLOW_SIZE)"


@pytest.mark.parametrize(("kind", "most"), [("command", 800), ("split", 2_000)])
def test_a_workflow_costs_a_task_its_dag_tasks_not_a_template(kind: str, most: int) -> None:
    def size(count: int) -> int:
        record, plans = tasks_of(kind, count)
        manifest = workflow_manifest(
            record=record, plans=plans, types=task_types(), cluster=CLUSTER
        )
        return workflow_bytes(manifest)

    small, large = size(10), size(100)

    assert (large - small) / 90 <= most, "bytes a task"
    assert large / 100 <= small / 10


def test_a_workflow_past_the_crds_200_templates_or_dag_tasks_is_refused_naming_the_limit() -> None:
    record, plans = commands(3)
    manifest = workflow_manifest(record=record, plans=plans, types=task_types(), cluster=CLUSTER)
    [dag, pod] = manifest["spec"]["templates"]
    many_templates = copy.deepcopy(manifest)
    many_templates["spec"]["templates"] += [{**pod, "name": f"p{i}"} for i in range(199)]
    many_tasks = copy.deepcopy(manifest)
    many_tasks["spec"]["templates"][0]["dag"]["tasks"] *= 67

    assert workflow_refusal(manifest) == ""
    assert re.search(
        r"201 Argo templates, more than the 200 .*CRD", workflow_refusal(many_templates)
    )
    assert re.search(r"201 DAG tasks, more than the 200 .*dag.tasks", workflow_refusal(many_tasks))


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
    tasks = {f"t{i}": {"command": ["echo", "x" * 2_000]} for i in range(500)}
    spec = parse_spec(yaml.safe_dump({"tasks": tasks}), types=task_types())

    with pytest.raises(SpecError) as refused:
        create_run(spec=spec, owner=owner, backend=backend, schedule=lambda run_id: None)

    assert "more than the 1 MiB a Workflow may be" in " ".join(refused.value.errors["tasks"])
    assert posts(kube) == [] and not Run.objects.exists()


def test_a_workflow_past_1_mib_that_the_api_server_took_is_failed_by_argo_saying_so(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    record, plans = commands(1, "y" * 1_100_000)
    manifest = workflow_manifest(record=record, plans=plans, types=task_types(), cluster=CLUSTER)
    assert WORKFLOW_BYTES_MAX < workflow_bytes(manifest) < ETCD_BYTES_MAX
    name = manifest["metadata"]["name"]
    CustomObjectsApi(kube.client()).create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", "simrun", "workflows", manifest
    )

    assert kube.state.argo_creates_pods("simrun", name) == []

    status = backend.status(name)
    assert status.phase == "Error"
    assert status.message.startswith("workflow is longer than maximum allowed size.")
    assert workflow_refusal(manifest), "ours refuses it before it is POSTed"


def test_argo_makes_no_more_pods_of_a_sweep_at_once_than_its_parallelism(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    record, plans = run_of(
        "tasks: {sweep: {type: squares, settings: {n: 100000}, workers: 1000, cores: 1}}"
    )
    name = backend.submit(record, plans, task_types(), CLUSTER)
    most = kube.state.workflows[("simrun", name)]["spec"]["parallelism"]

    first = kube.state.argo_creates_pods("simrun", name)
    for ended in first[:5]:
        kube.state.pods[("simrun", ended["metadata"]["name"])]["status"]["phase"] = "Succeeded"
    following = kube.state.argo_creates_pods("simrun", name)

    assert (len(first), len(following)) == (most, 5), "its parallelism, then as many as ended"
    assert kube.state.argo_creates_pods("simrun", name) == []
    names = {p["metadata"]["name"] for p in first + following}
    assert len(names) == most + 5, "each pod a worker of its own"


def test_a_run_whose_workflow_with_its_status_is_past_1_mib_is_refused_naming_it(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    """Argo holds the Workflow to 1 MiB with its status: the nodes of 500 tasks of distinct
    commands (which compress little) would bring a Workflow of 0.65 MiB past it mid-run, and
    Argo would fail it then; simrun refuses it at once."""
    record, plans = commands(500)
    draw = random.Random(43)
    distinct = {
        k: t.model_copy(update={"command": ["echo", "".join(draw.choices(LETTERS, k=1_000))]})
        for k, t in record.tasks.items()
    }
    record = record.model_copy(update={"tasks": distinct})
    manifest = workflow_manifest(record=record, plans=plans, types=task_types(), cluster=CLUSTER)
    assert workflow_bytes(manifest) < WORKFLOW_BYTES_MAX
    assert argo_too_large(manifest), "Argo's controller would fail it by its end"

    with pytest.raises(ValueError, match=r"with the status Argo keeps of its 1,004 nodes"):
        backend.submit(record, plans, task_types(), CLUSTER)

    assert posts(kube) == []
