"""A task killed twice for memory on Argo, through the controller: the harness's termination
message stops Argo's retries after the second kill, and the run's message names the retry
memory (Ruling 35), also for a plan at the limit, whose retry memory is its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.lifecycle import RETRY_MEMORY_NOTE, retry_memory_note
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig, TaskPlan
from runs.control.polling import reconcile_run
from runs.models import Run, RunState, Task
from tests.backends.argo_workflows import OOM, WF, Nodes, pod, workflow
from tests.backends.kube_api import KubeApiServer
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path):
    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path / "store", watch_timeout_s=5
    )
    yield backend
    backend.close()


@pytest.mark.parametrize("node", ["sweep-w0", "sweep-extra(0:1)", "sweep-merge"])
@pytest.mark.parametrize("at_the_limit", [False, True], ids=["retry above", "at the limit"])
def test_the_second_kill_argo_leaves_unretried_fails_the_run_naming_the_retry_memory(
    owner, backend: ArgoBackend, kube: KubeApiServer, settings, tmp_path, at_the_limit, node
):
    settings.SIMRUN_STORE = tmp_path / "store"
    run = running(submitted(owner), sweep="running")
    Run.objects.filter(pk=run.pk).update(workflow=WF)
    task = Task.objects.get(run=run, task_id="sweep")
    if at_the_limit:
        task.plan = {**task.plan, "retry_memory_gb": task.plan["memory_gb"]}
        task.save(update_fields=["plan"])
    retry_gb = TaskPlan.model_validate(task.plan).retry_memory_gb
    nodes = Nodes("Failed")
    second = f"{OOM}: {retry_memory_note({'SIMRUN_MEMORY_LIMIT_GB': str(retry_gb)})}"
    attempts = [
        pod("Failed", message=OOM, exit_code="137"),
        pod("Failed", message=second, exit_code="137"),
    ]
    if "extra" in node:
        nodes.fan_out("sweep-extra", "Failed", {"(0:1)": ("Failed", attempts)})
    else:
        nodes.task(node, "Failed", attempts, message=second)
    kube.state.put_workflow(workflow(nodes, "Failed", "child 'sweep-w0' failed"), "ADDED")

    run = Run.objects.get(pk=run.pk)
    reconcile_run(run, list(run.tasks.all()), backend=backend)

    run = Run.objects.get(pk=run.pk)
    worker = "sweep-w1" if "extra" in node else node
    assert run.state == RunState.FAILED and run.oom_kills == {worker: [0, 1]}
    assert f"killed for memory again with the retry memory {retry_gb:g} GiB" in run.message
    assert f"{RETRY_MEMORY_NOTE} ({retry_gb:g} GiB)" in second, "Argo's message names it too"


def test_the_memory_an_attempt_ran_with_is_read_from_its_harnesss_note_without_its_pod(
    backend: ArgoBackend, kube: KubeApiServer
):
    """Argo's node message carries the harness's note, which names the retry memory: the
    attempt's memory is known when its pod is gone (a pod GC, a node drained)."""
    nodes = Nodes("Failed")
    second = f"{OOM}: {retry_memory_note({'SIMRUN_MEMORY_LIMIT_GB': '6.75'})}"
    nodes.task(
        "summary",
        "Failed",
        [
            pod("Failed", message=OOM, exit_code="137"),
            pod("Failed", message=second, exit_code="137"),
        ],
    )
    kube.state.put_workflow(workflow(nodes, "Failed"), "ADDED")

    first, retry = backend.status(WF).failed["summary"]
    assert (first.memory_gb, retry.memory_gb) == (None, 6.75)
