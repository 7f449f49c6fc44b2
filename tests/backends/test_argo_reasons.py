"""Why a pod waits and why an attempt was ended, read from the pods and Kueue's Workloads as
the API server writes them, carried in the status the controller polls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.test import Client

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig
from runs.models import Attempt
from tests.backends import kubelet
from tests.backends.argo_runs import run_of
from tests.backends.argo_workflows import (
    SIGTERM,
    WF,
    Nodes,
    argo_pod,
    gated_pod,
    kube_node,
    pod,
    workflow,
    workload,
)
from tests.backends.kube_api import KubeApiServer
from tests.factories import running, submitted

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
UNSCHEDULABLE = (
    "0/3 nodes are available: 1 node(s) had untolerated taint "
    "{node-role.kubernetes.io/control-plane: }, 2 Insufficient memory. preemption: 0/3 nodes "
    "are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found "
    "for incoming pod."
)
QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for memory in flavor "
    "simrun-flavor, 6Gi more needed"
)


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> ArgoBackend:
    return ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path)


def failed_pod(name: str, node_name: str, *, attempt: int, **status: Any) -> dict[str, Any]:
    """A pod of an attempt that ended Failed, its main container stopped by SIGTERM."""
    found = argo_pod(name, node_name=node_name, phase="Failed", attempt=attempt, host="node-a")
    found["status"] = {
        "phase": "Failed",
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "PodFailed"},
            {"type": "PodScheduled", "status": "True"},
        ],
        "containerStatuses": [
            {
                "name": "main",
                "image": "registry.example/simrun-env:0123456789abcdef",
                "imageID": "registry.example/simrun-env@sha256:9f2c",
                "containerID": "containerd://5d1e",
                "started": False,
                "lastState": {},
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 143, "reason": "Error"}},
            }
        ],
        **status,
    }
    return found


def disruption(reason: str, message: str, kind: str = "DisruptionTarget") -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "lastTransitionTime": "2026-11-29T10:04:00Z",
        "reason": reason,
        "message": message,
    }


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        (
            disruption("PreemptionByScheduler", "sims: preempting to accommodate a higher pod"),
            "PreemptionByScheduler: sims: preempting to accommodate a higher pod",
        ),
        (
            disruption("EvictionByEvictionAPI", "Eviction API: evicting"),
            "EvictionByEvictionAPI: Eviction API: evicting",
        ),
        (
            disruption("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"),
            "DeletionByTaintManager: Taint manager: deleting due to NoExecute taint",
        ),
        (
            disruption("TerminationByKubelet", "The node was low on resource: memory."),
            "TerminationByKubelet: The node was low on resource: memory.",
        ),
        (
            disruption(
                "WorkloadEvictedDueToPreempted",
                "Preempted to accommodate a workload (UID: 1b2c) due to prioritization",
                kind="TerminationTarget",
            ),
            "WorkloadEvictedDueToPreempted: Preempted to accommodate a workload (UID: 1b2c) "
            "due to prioritization",
        ),
    ],
    ids=["scheduler", "drain", "taint", "kubelet", "kueue"],
)
def test_a_failed_attempt_carries_the_reason_its_pod_was_disrupted(
    backend: ArgoBackend, kube: KubeApiServer, condition: dict[str, str], reason: str
) -> None:
    nodes = Nodes()
    nodes.task(
        "sweep-w0", "Running", [pod("Failed", message=SIGTERM, exit_code="143"), pod("Running")]
    )
    kube.state.put_workflow(workflow(nodes), "ADDED")
    ended = failed_pod("p0", "sweep-w0(0)", attempt=0)
    ended["status"]["conditions"].append(condition)
    kube.state.put_pod(ended)

    [attempt] = backend.status(WF).failed["sweep-w0"]

    assert (attempt.attempt, attempt.reason, attempt.evicted) == (0, reason, True)
    assert attempt.memory_gb == 0.5  # the limit of its main container


def test_a_kubelet_eviction_without_a_condition_is_told_by_the_pods_reason(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Failed", message="The node was low"), pod("Pending")])
    kube.state.put_workflow(workflow(nodes), "ADDED")
    kube.state.put_pod(
        failed_pod(
            "p0",
            "sweep-w0(0)",
            attempt=0,
            reason="Evicted",
            message="The node was low on resource: ephemeral-storage. ",
        )
    )

    [attempt] = backend.status(WF).failed["sweep-w0"]

    assert attempt.reason == "Evicted: The node was low on resource: ephemeral-storage."


def test_a_pod_the_kubelet_evicted_for_overflowing_its_scratch_failed_itself(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    overflow = 'Usage of EmptyDir volume "scratch" exceeds the limit "10Gi". '
    nodes = Nodes()
    nodes.task("sweep-w0", "Failed", [pod("Failed", message=overflow, exit_code="137")])
    kube.state.put_workflow(workflow(nodes), "ADDED")
    kube.state.put_pod(
        failed_pod("p0", "sweep-w0(0)", attempt=0, reason="Evicted", message=overflow)
    )

    status = backend.status(WF)

    [attempt] = status.failed["sweep-w0"]
    assert status.tasks["sweep-w0"] == "Failed"
    assert (attempt.evicted, attempt.oom_killed) == (False, False)
    assert "exceeds the limit" in attempt.message


def test_an_attempt_that_failed_itself_has_no_reason(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Failed", [pod("Failed", message="main: Error (exit code 3)")])
    kube.state.put_workflow(workflow(nodes), "ADDED")
    kube.state.put_pod(failed_pod("p0", "sweep-w0(0)", attempt=0))

    [attempt] = backend.status(WF).failed["sweep-w0"]

    assert (attempt.reason, attempt.evicted) == ("", False)


def test_an_unschedulable_pod_says_why_from_argos_message_and_its_pod(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Pending", [pod("Pending", message=f"Unschedulable: {UNSCHEDULABLE}")])
    kube.state.put_workflow(workflow(nodes), "ADDED")
    just_now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    waiting = argo_pod("p0", node_name="sweep-w0(0)", phase="Pending", created=just_now)
    waiting["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": UNSCHEDULABLE,
            "lastTransitionTime": just_now,
        }
    ]
    kube.state.put_pod(waiting)

    status = backend.status(WF)

    assert status.waiting == {"sweep-w0": f"Unschedulable: {UNSCHEDULABLE}"}


def test_a_pod_kueue_holds_back_says_where_its_workload_stands(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Running")])
    nodes.fan_out(
        "sweep-extra",
        "Running",
        {"(0:1)": ("Pending", [pod("Pending")]), "(1:2)": ("Pending", [pod("Pending")])},
    )
    kube.state.put_workflow(workflow(nodes), "ADDED")
    kube.state.put_pod(gated_pod("p1", "sweep-extra(0:1)(0)", "uid-1"))
    kube.state.put_pod(gated_pod("p2", "sweep-extra(1:2)(0)", "uid-2"))
    kube.state.workloads[("simrun", "pod-p1")] = workload(
        "p1",
        "uid-1",
        [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA},
            {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": ""},
        ],
    )
    kube.state.workloads[("simrun", "pod-p2")] = workload(
        "p2",
        "uid-2",
        [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {
                "type": "Admitted",
                "status": "False",
                "reason": "NoChecks",
                "message": "The workload has not all checks ready",
            },
        ],
    )
    kube.state.workloads[("simrun", "pod-other")] = workload("other", "uid-9", [])

    status = backend.status(WF)

    assert status.waiting == {
        "sweep-extra(0:1)": f"waiting for quota in Kueue: {QUOTA}",
        "sweep-extra(1:2)": "quota reserved by Kueue, waiting for admission: "
        "The workload has not all checks ready",
    }
    [listing] = [
        r for r in kube.state.requests if r.path.endswith("/workloads") and "watch" not in r.query
    ]
    assert listing.query["labelSelector"] == "kueue.x-k8s.io/job-uid", "Kueue's, of pods"


def test_a_running_workflow_without_failures_reads_no_pods(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Running")])
    kube.state.put_workflow(workflow(nodes), "ADDED")

    backend.status(WF)

    assert [r.path for r in kube.state.requests] == [
        f"/apis/argoproj.io/v1alpha1/namespaces/simrun/workflows/{WF}"
    ]


def test_reasons_that_cannot_be_read_leave_the_status_as_it_was(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Failed", message=SIGTERM, exit_code="143")])
    kube.state.put_workflow(workflow(nodes), "ADDED")
    kube.state.intercept = lambda request: 403 if request.path.endswith("/pods") else None

    [attempt] = backend.status(WF).failed["sweep-w0"]

    assert attempt.exit_code == 143 and attempt.reason == ""


@pytest.mark.django_db
def test_the_run_page_shows_why_an_attempt_was_ended(owner: Any) -> None:
    run = running(submitted(owner), sweep="running")
    Attempt.objects.create(
        task=run.tasks.get(task_id="sweep"),
        worker="sweep-w0",
        attempt=0,
        exit_code=143,
        evicted=True,
        reason="EvictionByEvictionAPI: Eviction API: evicting",
    )
    client = Client()
    client.force_login(owner)

    page = client.get(f"/runs/{run.id}/").content.decode()

    assert (
        '<span class="small muted" data-attempt-reason>EvictionByEvictionAPI: Eviction API: '
        "evicting</span>"
    ) in page


def a_submitted_run(backend: ArgoBackend, kube: KubeApiServer, image: str) -> str:
    """A run of one command task in ``image``, submitted, its workflow Pending, its pod made
    by Argo and started by the kubelet."""
    record, plans = run_of(f"tasks: {{plot: {{command: [python, /a/plot.py], image: '{image}'}}}}")
    name = backend.submit(record, plans, task_types(), CLUSTER)
    nodes = Nodes("Pending")
    nodes.task("plot", "Pending", [pod("Pending", message="ImagePullBackOff: Back-off")])
    stored = kube.state.workflows[("simrun", name)]
    stored["status"] = workflow(nodes)["status"]
    kube.state.put_workflow(stored)
    kube.state.argo_creates_pods("simrun", name)
    return name


def test_a_pod_that_cannot_pull_its_image_fails_its_task_once_the_start_timeout_passed(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.unpullable.add("registry.example/typo:1")
    name = a_submitted_run(backend, kube, "registry.example/typo:1")

    with time_machine.travel(time.time() + CLUSTER.pod_start_timeout_s + 1, tick=False):
        status = backend.status(name)

    assert status.tasks["plot"] == "Failed"
    [attempt] = status.failed["plot"]
    assert attempt.message.startswith(
        f"its pod could not start within {CLUSTER.pod_start_timeout_s} s: main: ImagePullBackOff"
    )
    assert "registry.example/typo:1" in attempt.message


def test_a_pod_that_cannot_start_yet_waits_with_its_reason_within_the_start_timeout(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.unpullable.add("registry.example/typo:1")
    name = a_submitted_run(backend, kube, "registry.example/typo:1")

    status = backend.status(name)

    assert status.tasks["plot"] == "Pending"
    assert status.failed == {}


def test_a_pod_reading_a_secret_its_namespace_lacks_fails_its_task_with_the_kubelets_reason(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    name = a_submitted_run(backend, kube, "python:3.12-slim")
    [made] = [p for p in kube.state.pods.values() if p["metadata"]["labels"].get("simrun/task")]
    main = made["spec"]["containers"][1]
    main["env"].append(
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api-token", "key": "t"}}}
    )
    kubelet.start(kube.state, made)

    with time_machine.travel(time.time() + CLUSTER.pod_start_timeout_s + 1, tick=False):
        status = backend.status(name)

    [attempt] = status.failed["plot"]
    assert 'CreateContainerConfigError: secret "api-token" not found' in attempt.message
    assert kube.state.events[-1]["message"] == 'Error: secret "api-token" not found'


def test_an_unschedulable_pod_is_timed_from_its_admission_not_from_its_time_in_the_queue(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    """Two hours gated in Kueue's queue, then no node fits: its clock starts at the admission
    (the scheduler keeps PodScheduled's lastTransitionTime from SchedulingGated)."""
    flavor = kube.state.cluster_queues["simrun"]["spec"]["resourceGroups"][0]["flavors"][0]
    quota = flavor["resources"][1]
    assert quota["name"] == "memory"
    start = time.time()
    with time_machine.travel(start, tick=False) as clock:
        record, plans = run_of("tasks: {plot: {command: [python, /a/plot.py], image: 'python:3'}}")
        name = backend.submit(record, plans, task_types(), CLUSTER)
        nodes = Nodes("Pending")
        nodes.task("plot", "Pending", [pod("Pending")])
        stored = kube.state.workflows[("simrun", name)]
        stored["status"] = workflow(nodes)["status"]
        kube.state.put_workflow(stored)
        kept, quota["nominalQuota"] = quota["nominalQuota"], "1Mi"  # other runs hold the quota
        [made] = kube.state.argo_creates_pods("simrun", name)
        assert made["spec"]["schedulingGates"]  # held in the queue
        clock.shift(2 * 3600)
        small = kube_node("node-small")
        small["status"]["allocatable"]["memory"] = "100Mi"
        kube.state.put_node(small)
        quota["nominalQuota"] = kept
        kube.state.admit_workloads()  # admitted; no node fits
        assert not made["spec"]["schedulingGates"]
        clock.shift(5)

        waiting = backend.status(name)
        clock.shift(CLUSTER.pod_start_timeout_s)
        stuck = backend.status(name)

        kube.state.record_event(
            made, "TriggeredScaleUp", "pod triggered scale-up: [{pool-b 0->1 (max: 4)}]", "Normal"
        )
        clock.shift(1)
        backend.reasons_ttl_s = 0
        scaling = backend.status(name)

    assert waiting.tasks["plot"] == "Pending"
    assert waiting.waiting["plot"].startswith("Unschedulable: 0/1 nodes are available")
    assert waiting.failed == {}
    assert (scaling.tasks["plot"], scaling.failed) == ("Pending", {}), "a node is on its way"
    assert (
        scaling.waiting["plot"] == "Unschedulable: the cluster autoscaler is adding a node for it"
    )
    assert stuck.tasks["plot"] == "Failed"
    [attempt] = stuck.failed["plot"]
    assert attempt.message == (
        f"its pod could not start within {CLUSTER.pod_start_timeout_s} s: Unschedulable: "
        "0/1 nodes are available: 1 Insufficient memory."
    )


def test_a_pod_whose_volume_cannot_be_mounted_fails_its_task_with_the_kubelets_event(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    """A Secret volume its namespace lacks: scheduled, its containers wait in PodInitializing
    and the kubelet writes FailedMount. Timed from its scheduling; its events are read only
    once it is past the timeout, and the message names the last."""
    start = time.time()
    with time_machine.travel(start, tick=False) as clock:
        name = a_submitted_run(backend, kube, "python:3.12-slim")
        [made] = [p for p in kube.state.pods.values() if p["metadata"]["labels"].get("simrun/task")]
        made["spec"]["volumes"].append({"name": "token", "secret": {"secretName": "api-token"}})
        kubelet.start(kube.state, made)
        clock.shift(CLUSTER.pod_start_timeout_s - 1)
        waiting = backend.status(name)
        read_before = [r for r in kube.state.requests if r.path.endswith("/events")]
        clock.shift(2)
        stuck = backend.status(name)

    assert waiting.tasks["plot"] == "Pending"
    assert waiting.failed == {}
    assert read_before == []
    assert stuck.tasks["plot"] == "Failed"
    [attempt] = stuck.failed["plot"]
    assert attempt.message == (
        f"its pod could not start within {CLUSTER.pod_start_timeout_s} s: stage: "
        'PodInitializing: FailedMount: MountVolume.SetUp failed for volume "token" : secret '
        '"api-token" not found'
    )
    [read] = [r for r in kube.state.requests if r.path.endswith("/events")]
    assert read.status == 200
    assert (
        read.query["fieldSelector"] == f"involvedObject.uid={made['metadata']['uid']},type=Warning"
    )
    assert int(read.query["limit"]) <= 20


def test_a_pod_staging_its_inputs_is_not_stuck_however_long_main_waits(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    """Once a container started (``stage`` copying large inputs), ``main`` waiting in
    PodInitializing is no failure to start."""
    name = a_submitted_run(backend, kube, "python:3.12-slim")
    [made] = [p for p in kube.state.pods.values() if p["metadata"]["labels"].get("simrun/task")]

    def state(name: str, **state: Any) -> dict[str, Any]:
        return {
            "name": name,
            "image": "",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": "running" in state,
            "state": state,
        }

    scheduled = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    made["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}],
        "initContainerStatuses": [
            state("init", terminated={"exitCode": 0, "reason": "Completed"}),
            state("stage", running={"startedAt": scheduled}),
        ],
        "containerStatuses": [
            state("wait", waiting={"reason": "PodInitializing"}),
            state("main", waiting={"reason": "PodInitializing"}),
        ],
    }

    with time_machine.travel(time.time() + 10 * CLUSTER.pod_start_timeout_s, tick=False):
        status = backend.status(name)

    assert status.tasks["plot"] == "Pending"
    assert status.failed == {}
    assert not [r for r in kube.state.requests if r.path.endswith("/events")]
