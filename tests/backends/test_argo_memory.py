"""A task killed twice for memory on Argo, through the controller: the harness's termination
message stops Argo's retries after the second kill, and the run's message names the retry
memory (Ruling 35), also for a plan at the limit, whose retry memory is its own. A command
task has no harness to say so: Argo retries its second kill once more, and the service fails
the run naming the retry memory all the same."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from harness.lifecycle import RETRY_MEMORY_NOTE, retry_memory_note
from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.retries import RETRY_EXPRESSION
from runs.backends.argo.versions import main_caps
from runs.backends.base import ClusterConfig, TaskPlan
from runs.control.polling import reconcile_run
from runs.models import Run, RunState, Task
from runs.planning.planner import plan_run
from runs.planning.spec_document import parse_spec
from tests.backends.argo_runs import evaluate
from tests.backends.argo_workflows import OOM, WF, Nodes, pod, workflow
from tests.backends.kube_api import KubeApiServer
from tests.factories import SWEEP_YAML, running, submitted

pytestmark = pytest.mark.django_db

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
SMALL_NODE = main_caps({"cpu": Decimal(4), "memory": Decimal(320 * 2**20)})
"""What a pod's ``main`` may ask of a node of 4 cores and 320 MiB, Argo's ``wait`` beside it
(3 cores, 0.25 GiB): the largest node, where the Argo backend caps a plan."""
COMMAND = "name: limits\ntasks:\n  solve: {command: [solve]}\n"


def plan_at_the_node(run: Run, text: str, task_id: str) -> TaskPlan:
    """Plan ``task_id`` of ``run`` (of the spec ``text``) again as a cluster whose largest node
    is ``SMALL_NODE`` plans it (at its limit: the retry memory is the plan's); store it."""
    types = task_types()
    spec = parse_spec(text, types=types)
    cores, memory_gb = SMALL_NODE
    plan = plan_run(spec, types=types, max_cores=cores, max_memory_gb=memory_gb)[task_id]
    assert plan.memory_gb == plan.retry_memory_gb == memory_gb, plan.why
    Task.objects.filter(run=run, task_id=task_id).update(plan=plan.model_dump(mode="json"))
    return plan


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
        plan_at_the_node(run, SWEEP_YAML, "sweep")
        task.refresh_from_db()
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


def test_a_command_task_killed_twice_at_the_limit_fails_the_run_naming_the_retry_memory(
    owner, backend: ArgoBackend, kube: KubeApiServer, settings, tmp_path
):
    """The original case of "retried on every 137": a command task planned at the largest
    node, killed for memory twice. Its own image has no harness to note the retry memory, so
    Argo's retry expression starts a third attempt; the service's poll fails the run on the
    second proven kill, the retry's, names the retry memory (the plan's own, at the limit) and
    stops the workflow, which deletes the pending third attempt."""
    settings.SIMRUN_STORE = tmp_path / "store"
    run = running(submitted(owner, COMMAND), solve="running")
    Run.objects.filter(pk=run.pk).update(workflow=WF)
    plan = plan_at_the_node(run, COMMAND, "solve")
    nodes = Nodes("Running")
    killed = pod("Failed", message=OOM, exit_code="137")
    nodes.task("solve", "Running", [killed, killed, pod("Pending")])
    kube.state.put_workflow(workflow(nodes, "Running"), "ADDED")
    second = {"exitCode": "137", "status": "Failed", "message": OOM}
    assert evaluate(RETRY_EXPRESSION, second), "no note: Argo retries the second kill once more"

    run = Run.objects.get(pk=run.pk)
    reconcile_run(run, list(run.tasks.all()), backend=backend)

    run = Run.objects.get(pk=run.pk)
    assert run.state == RunState.FAILED and run.oom_kills == {"solve": [0, 1]}, run.message
    assert (
        f"solve was killed for memory again with the retry memory {plan.retry_memory_gb:g} GiB"
        in run.message
    )
    reconcile_run(run, list(run.tasks.all()), backend=backend)  # settles the decided run
    assert kube.state.workflows[("simrun", WF)]["spec"]["shutdown"] == "Stop", "no third attempt"


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
