"""The Argo backend against a Kubernetes API on loopback, with the real ``kubernetes`` client."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.build import build_pod_name
from runs.backends.argo.clients import api_client
from runs.backends.argo.manifest import workflow_manifest
from runs.backends.base import ClusterConfig, NodeInfo, PodLog
from runs.planning.spec import SpecError
from tests.backends.argo_pods import main_container, node_pod
from tests.backends.argo_runs import build_context, run_of
from tests.backends.argo_workflows import OOM, WF, Nodes, argo_pod, kube_node, pod, workflow
from tests.backends.kube_api import KubeApiServer, Request
from tests.polling import wait_for

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
SPEC = "tasks: {sweep: {type: squares, settings: {n: 100}, workers: 2}}"
RESERVED = "simrun/reserved"


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> Iterator[ArgoBackend]:
    backend = ArgoBackend(
        cluster=CLUSTER,
        api=kube.client(),
        store=tmp_path / "store",
        build_poll_s=0.01,
        watch_timeout_s=5,
    )
    yield backend
    backend.close()


def submit(backend: ArgoBackend) -> str:
    record, plans = run_of(SPEC)
    return backend.submit(record, plans, task_types(), CLUSTER)


# Workflows


def test_submit_creates_the_workflow_of_the_run_in_the_namespace(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    record, plans = run_of(SPEC)

    name = backend.submit(record, plans, task_types(), CLUSTER)

    assert name == WF
    stored = kube.state.workflows[("simrun", WF)]
    expected = workflow_manifest(record=record, plans=plans, types=task_types(), cluster=CLUSTER)
    assert stored["spec"] == expected["spec"]
    [create] = [r for r in kube.state.requests if r.method == "POST"]
    assert create.path == "/apis/argoproj.io/v1alpha1/namespaces/simrun/workflows"


def test_a_command_sweep_is_submitted_as_the_workflow_of_its_split_task(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    text = """
tasks:
  sim:
    command: [md-sim, --T, "{T}", --out, "{out}/r.json"]
    sweep: {T: {linspace: [0.5, 3.0, 26]}}
    workers: 2
    results: r.json
"""
    record, plans = run_of(text)

    name = backend.submit(record, plans, task_types(), CLUSTER)

    stored = kube.state.workflows[("simrun", name)]
    for node, command in (("sim-w0", "simrun-worker"), ("sim-merge", "simrun-merge")):
        assert main_container(node_pod(stored, node))["command"][-1] == command


def test_a_workflow_that_exists_already_is_taken_as_submitted(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    first = submit(backend)
    kube.state.workflows[("simrun", WF)]["status"] = {"phase": "Running"}

    assert submit(backend) == first
    assert [r.status for r in kube.state.requests if r.method == "POST"] == [201, 409]
    assert kube.state.workflows[("simrun", WF)]["status"] == {"phase": "Running"}


def test_a_run_that_cannot_run_is_refused_before_the_cluster_is_asked(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    record, plans = run_of(SPEC, image="")

    with pytest.raises(ValueError, match="no image"):
        backend.submit(record, plans, task_types(), CLUSTER)
    assert kube.state.requests == []


def test_a_task_id_the_cluster_would_refuse_as_a_label_is_refused_before_the_cluster(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    with pytest.raises(SpecError) as raised:
        record, plans = run_of("tasks: {sweep-: {type: squares, settings: {n: 5}}}")
        backend.submit(record, plans, task_types(), CLUSTER)  # the strict API refuses it

    assert "ends with a letter or digit" in raised.value.errors["tasks.sweep-"][0]
    assert kube.state.requests == []


def test_status_reads_the_nodes_of_the_workflow(backend: ArgoBackend, kube: KubeApiServer) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Failed", message=OOM, exit_code="137"), pod("Running")])
    kube.state.put_workflow(workflow(nodes), "ADDED")

    status = backend.status(WF)

    assert status.phase == "Running"
    assert status.tasks == {"sweep-w0": "Running"}
    assert status.failed["sweep-w0"][0].oom_killed


def test_a_workflow_deleted_by_its_time_to_live_is_unknown(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(workflow(Nodes("Succeeded"), "Succeeded"), "ADDED")
    assert backend.status(WF).phase == "Succeeded"

    kube.state.delete_workflow("simrun", WF)

    with pytest.raises(KeyError):
        backend.status(WF)
    with pytest.raises(KeyError):
        backend.cancel(WF)
    with pytest.raises(KeyError):
        backend.stop(WF)


@pytest.mark.parametrize(("method", "strategy"), [("stop", "Stop"), ("cancel", "Terminate")])
def test_stop_and_cancel_merge_patch_the_shutdown_of_the_workflow(
    backend: ArgoBackend, kube: KubeApiServer, method: str, strategy: str
) -> None:
    submit(backend)

    getattr(backend, method)(WF)

    [patch] = [r for r in kube.state.requests if r.method == "PATCH"]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {"spec": {"shutdown": strategy}}
    assert kube.state.workflows[("simrun", WF)]["spec"]["shutdown"] == strategy
    assert kube.state.workflows[("simrun", WF)]["spec"]["entrypoint"] == "Run"


# Pods


def test_logs_are_every_attempt_of_the_task_still_there_oldest_first(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    state = kube.state
    state.put_pod(
        argo_pod(
            "p-retry",
            node_name="sweep-w0(1)",
            phase="Running",
            attempt=1,
            created="2026-11-29T10:05:00Z",
        ),
        log="second start\nunit 7 done\n",
    )
    state.put_pod(
        argo_pod("p-first", node_name="sweep-w0(0)", phase="Failed"),
        log="first start\nunit 1 done\nKilled\n",
    )
    state.put_pod(
        argo_pod(
            "p-extra",
            node_name="sweep-extra(0:1)(0)",
            phase="Pending",
            dag_task="sweep-extra",
            worker="sweep-w1",
            created="2026-11-29T10:06:00Z",
        ),
    )
    state.put_pod(
        argo_pod("p-other", node_name="plot(0)", phase="Succeeded", task="plot", dag_task="plot"),
        log="not this task\n",
    )

    logs = backend.logs(WF, "sweep")

    assert logs == [
        PodLog(
            node="sweep-w0(0)",
            pod="p-first",
            text="first start\nunit 1 done\nKilled\n",
            done=True,
            attempt=0,
        ),
        PodLog(
            node="sweep-w0(1)",
            pod="p-retry",
            text="second start\nunit 7 done\n",
            done=False,
            attempt=1,
        ),
        PodLog(node="sweep-extra(0:1)(0)", pod="p-extra", text="", done=False, attempt=0),
    ]
    reads = [r for r in state.requests if r.path.endswith("/log")]
    assert {r.query["container"] for r in reads} == {"main"}


def test_logs_keep_the_last_lines_asked_for(backend: ArgoBackend, kube: KubeApiServer) -> None:
    kube.state.put_pod(
        argo_pod("p", node_name="sweep-w0(0)", phase="Succeeded"), log="a\nb\nc\nd\n"
    )

    [log] = backend.logs(WF, "sweep", tail_lines=2)

    assert log.text == "c\nd\n"
    assert [r.query.get("tailLines") for r in kube.state.requests if r.path.endswith("/log")] == [
        "2"
    ]


def test_a_running_pod_deleted_between_the_list_and_its_log_is_skipped(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_pod(argo_pod("p", node_name="sweep-w0(0)", phase="Running"), log="x\n")
    original = kube.state.pods

    class Vanishing(dict):
        def get(self, key: Any, default: Any = None) -> Any:
            return None  # the log request finds no pod: deleted by the pod GC meanwhile

    kube.state.pods = Vanishing(original)
    assert backend.logs(WF, "sweep") == []


def test_placements_are_the_pods_not_terminated_with_requests_worker_and_attempt(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    state = kube.state
    state.put_pod(
        argo_pod(
            "p-w0",
            node_name="sweep-w0(1)",
            phase="Running",
            attempt=1,
            host="node-a",
            cores="4",
            memory="2Gi",
        )
    )
    state.put_pod(
        argo_pod(
            "p-w1",
            node_name="sweep-extra(0:1)(0)",
            phase="Pending",
            dag_task="sweep-extra",
            worker="sweep-w1",
        )
    )
    state.put_pod(
        argo_pod(
            "p-merge",
            node_name="sweep-merge(0)",
            phase="Running",
            dag_task="sweep-merge",
            worker=None,
            host="node-b",
        )
    )
    state.put_pod(argo_pod("p-done", node_name="sweep-w0(0)", phase="Failed", host="node-a"))
    state.put_pod(argo_pod("p-ok", node_name="plot(0)", phase="Succeeded", dag_task="plot"))

    placements = {p.pod: p for p in backend.placements()}

    assert set(placements) == {"p-w0", "p-w1", "p-merge"}
    w0 = placements["p-w0"]
    assert (w0.workflow, w0.dag_task, w0.node, w0.phase) == (WF, "sweep-w0", "node-a", "Running")
    assert w0.cores == pytest.approx(4.1)  # main and Argo's wait container
    assert w0.memory_gb == pytest.approx(2 + 64 / 1024)
    assert (w0.worker, w0.attempt) == ("sweep-w0", 1)
    w1 = placements["p-w1"]
    assert (w1.node, w1.phase, w1.worker, w1.attempt) == (None, "Pending", "sweep-w1", 0)
    assert (placements["p-merge"].worker, placements["p-merge"].dag_task) == (None, "sweep-merge")
    [listing] = [r for r in state.requests if r.path.endswith("/pods") and "watch" not in r.query]
    selector = "simrun/run,!workflows.argoproj.io/controller-instanceid"  # no instanceID
    assert listing.query["labelSelector"] == selector


# Nodes and reservations


def test_nodes_are_the_nodes_of_the_selector_with_their_size_and_holder(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    kube.state.put_node(kube_node("node-a", labels={"pool": "sims", RESERVED: "run1"}))
    kube.state.put_node(kube_node("node-b", labels={"pool": "sims"}))
    kube.state.put_node(kube_node("web-1", labels={"pool": "web"}))
    kube.state.nodes["node-b"]["status"]["conditions"][0]["status"] = "False"
    cluster = CLUSTER.model_copy(update={"node_selector": {"pool": "sims"}})
    backend = ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path)

    nodes = {n.name: n for n in backend.nodes()}

    assert set(nodes) == {"node-a", "node-b"}
    a = nodes["node-a"]
    assert a.memory_gb == pytest.approx(31893100 / 1024 / 1024)
    assert a.model_copy(update={"memory_gb": 0}) == NodeInfo(
        name="node-a",
        cores=7.91,
        memory_gb=0,
        ready=True,
        reserved_by="run1",
        labels={"kubernetes.io/hostname": "node-a", "pool": "sims", RESERVED: "run1"},
    )
    [listing] = [r for r in kube.state.requests if r.path == "/api/v1/nodes"]
    assert listing.query["labelSelector"] == "pool=sims"
    assert (nodes["node-b"].ready, nodes["node-b"].reserved_by) == (False, None)


def test_a_cordoned_node_is_not_ready(backend: ArgoBackend, kube: KubeApiServer) -> None:
    node = kube_node("node-a")
    node["spec"]["unschedulable"] = True
    kube.state.put_node(node)

    assert [n.ready for n in backend.nodes()] == [False]


OTHER_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
POOL = {"simrun.io/pool": "sims"}


def write_once_meanwhile(kube: KubeApiServer, change: Callable[[dict[str, Any]], object]) -> None:
    """Play another writer that changes a node once, between simrun's read and its patch."""
    written = []

    def other_writer(name: str) -> None:
        if not written:
            node = kube.state.nodes[name]
            change(node)
            kube.state.stamp(node)
            written.append(name)

    kube.state.before_node_patch = other_writer


def test_reserve_taints_and_labels_the_node_and_keeps_its_other_taints(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL, taints=[OTHER_TAINT]))

    backend.reserve("node-a", "run1")

    node = kube.state.nodes["node-a"]
    assert node["metadata"]["labels"][RESERVED] == "run1"
    assert node["spec"]["taints"] == [
        OTHER_TAINT,
        {"key": RESERVED, "value": "run1", "effect": "NoSchedule"},
    ]
    [patch] = [r for r in kube.state.requests if r.method == "PATCH"]
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert "resourceVersion" in patch.body["metadata"]


def test_a_reservation_leaves_the_daemonset_pods_of_the_node_running(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL))
    agent = argo_pod("csi-node-a", node_name="x", phase="Running", host="node-a")
    agent["spec"]["tolerations"] = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
    kube.state.put_pod(agent)

    backend.reserve("node-a", "run1")

    assert kube.state.evicted == [], "the taint manager evicts no pod for a reservation"
    assert ("simrun", "csi-node-a") in kube.state.pods


def test_reserve_retries_after_a_conflicting_writer_and_keeps_what_it_wrote(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL, taints=[OTHER_TAINT]))
    write_once_meanwhile(
        kube,
        lambda node: node["spec"]["taints"].append({"key": "maintenance", "effect": "NoSchedule"}),
    )

    backend.reserve("node-a", "run1")

    patches = [r.status for r in kube.state.requests if r.method == "PATCH"]
    assert patches == [409, 200]
    assert kube.state.nodes["node-a"]["spec"]["taints"] == [
        OTHER_TAINT,
        {"key": "maintenance", "effect": "NoSchedule"},
        {"key": RESERVED, "value": "run1", "effect": "NoSchedule"},
    ]


def test_a_node_reserved_by_another_run_is_refused_and_left_as_it_is(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(
        kube_node(
            "node-a",
            labels={**POOL, RESERVED: "run0"},
            taints=[{"key": RESERVED, "value": "run0", "effect": "NoExecute"}],
        )
    )

    with pytest.raises(ValueError, match="run0"):
        backend.reserve("node-a", "run1")
    assert [r for r in kube.state.requests if r.method == "PATCH"] == []


def test_reserving_a_node_twice_for_a_run_writes_it_once(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL))

    backend.reserve("node-a", "run1")
    backend.reserve("node-a", "run1")

    assert len([r for r in kube.state.requests if r.method == "PATCH"]) == 1


def test_unreserve_removes_only_this_runs_taint_and_label(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL, taints=[OTHER_TAINT]))
    backend.reserve("node-a", "run1")

    backend.unreserve("node-a", "run1")

    node = kube.state.nodes["node-a"]
    assert RESERVED not in node["metadata"]["labels"]
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "node-a"
    assert node["spec"]["taints"] == [OTHER_TAINT]


def test_a_late_release_leaves_the_reservation_of_a_later_run(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL, taints=[OTHER_TAINT]))
    backend.reserve("node-a", "run2")
    before = kube.state.nodes["node-a"]

    backend.unreserve("node-a", "run1")

    assert kube.state.nodes["node-a"] == before
    assert len([r for r in kube.state.requests if r.method == "PATCH"]) == 1


def test_unreserve_retries_after_a_conflicting_writer(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL, taints=[OTHER_TAINT]))
    backend.reserve("node-a", "run1")
    write_once_meanwhile(kube, lambda node: node["metadata"]["labels"].update(team="b"))

    backend.unreserve("node-a", "run1")

    node = kube.state.nodes["node-a"]
    assert [r.status for r in kube.state.requests if r.method == "PATCH"] == [200, 409, 200]
    assert node["metadata"]["labels"]["team"] == "b"
    assert RESERVED not in node["metadata"]["labels"]
    assert node["spec"]["taints"] == [OTHER_TAINT]


def test_a_node_that_keeps_changing_is_an_error_not_a_loop(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_node(kube_node("node-a", labels=POOL))
    kube.state.before_node_patch = lambda name: kube.state.stamp(kube.state.nodes[name])

    with pytest.raises(RuntimeError, match="kept changing"):
        backend.reserve("node-a", "run1")


def test_an_unknown_node_is_a_key_error(backend: ArgoBackend) -> None:
    with pytest.raises(KeyError):
        backend.reserve("nowhere", "run1")
    with pytest.raises(KeyError):
        backend.unreserve("nowhere", "run1")


# Change notifications


def watches(kube: KubeApiServer) -> list[Any]:
    return [r for r in kube.state.requests if r.query.get("watch") == "true"]


def test_subscribe_calls_back_when_a_workflow_of_a_run_changes(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    submit(backend)
    woken = threading.Event()
    backend.subscribe(woken.set)
    wait_for(lambda: watches(kube))
    assert not woken.wait(0.3)  # nothing changed since the watch started

    wf = kube.state.workflows[("simrun", WF)]
    wf["status"] = {"phase": "Running"}
    kube.state.put_workflow(wf)

    assert woken.wait(10)
    selector = "simrun/run,!workflows.argoproj.io/controller-instanceid"  # no instanceID
    assert watches(kube)[0].query["labelSelector"] == selector


def test_the_watch_goes_on_from_where_it_was_after_the_server_ends_it(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path, watch_timeout_s=1)
    woken = threading.Event()
    try:
        backend.subscribe(woken.set)
        wait_for(lambda: len(watches(kube)) >= 2)
        kube.state.put_workflow(workflow(Nodes()), "ADDED")
        assert woken.wait(10)
    finally:
        backend.close()
    assert all("resourceVersion" in r.query for r in watches(kube))
    assert not backend.watching


# Images


def test_build_image_builds_the_context_with_a_kaniko_pod_in_the_build_namespace(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path, build_poll_s=0.01)
    created = []

    def run_it(pod_: dict) -> None:
        created.append(copy.deepcopy(pod_))
        config_map = kube.state.config_maps[("simrun-build", pod_["metadata"]["name"])]
        created.append(copy.deepcopy(config_map))
        pod_["status"] = {"phase": "Succeeded"}

    kube.state.on_pod_created = run_it
    ref = "registry.example/simrun-env:abc"

    backend.build_image(build_context(tmp_path / "store" / "images" / "abc"), ref)

    [pod_, config_map] = created
    assert pod_["metadata"]["namespace"] == "simrun-build"
    assert "kueue.x-k8s.io/queue-name" not in pod_["metadata"]["labels"]
    main = pod_["spec"]["containers"][0]
    assert main["image"] == CLUSTER.builder_image
    assert main["args"][:3] == [
        "--context=dir:///workspace",
        "--dockerfile=/workspace/Dockerfile",
        f"--destination={ref}",
    ]
    assert main["volumeMounts"][0] == {
        "name": "context",
        "mountPath": "/workspace",
        "readOnly": True,
    }
    assert set(config_map["data"]) == {"Dockerfile", "requirements.txt"}
    assert config_map["data"]["requirements.txt"] == "numpy==2.1.3\n"
    name = build_pod_name(ref)
    assert ("simrun-build", name) not in kube.state.pods  # deleted once done, with its context
    assert ("simrun-build", name) not in kube.state.config_maps


def test_a_failed_build_raises_with_the_end_of_its_log(
    backend: ArgoBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    ref = "registry.example/simrun-env:abc"

    def fail(pod_: dict) -> None:
        pod_["status"] = {"phase": "Failed"}
        kube.state.logs[("simrun-build", pod_["metadata"]["name"])] = (
            "INFO[0003] RUN pip install --no-cache-dir -r /tmp/requirements.txt\n"
            "ERROR: Could not find a version that satisfies the requirement numpy==99\n"
            "ERROR: No matching distribution found for numpy==99\n"
            "error building image: error building stage: failed to execute command: "
            "waiting for process to exit: exit status 1\n"
        )

    kube.state.on_pod_created = fail

    with pytest.raises(RuntimeError) as raised:
        backend.build_image(build_context(tmp_path / "images" / "abc"), ref)

    assert str(raised.value) == (
        f"the build of {ref} failed: ERROR: No matching distribution found for numpy==99"
    )
    assert kube.state.pods == {} and kube.state.config_maps == {}


def registry_secret(kube: KubeApiServer, namespace: str) -> None:
    """The registry Secret as docs/cluster.md has an operator create it."""
    kube.state.secrets[(namespace, "simrun-registry")] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "simrun-registry", "namespace": namespace},
        "type": "kubernetes.io/dockerconfigjson",
    }


def test_a_build_whose_registry_secret_is_not_in_the_build_namespace_fails_at_once(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    cluster = CLUSTER.model_copy(update={"pull_secret": "simrun-registry"})
    backend = ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path, build_poll_s=0.01)
    registry_secret(kube, "simrun")  # the runs' namespace has it, the build's does not
    ref = "registry.example/simrun-env:abc"

    with pytest.raises(RuntimeError) as raised:
        backend.build_image(build_context(tmp_path / "images" / "abc"), ref)

    assert str(raised.value) == (
        f"the build of {ref} cannot start: FailedMount: MountVolume.SetUp failed for volume "
        '"docker-config" : secret "simrun-registry" not found'
    )
    reads = [r.status for r in kube.state.requests if r.method == "GET" and "/pods/" in r.path]
    assert reads == [404, 200], "it failed at its first look after creating it, not at the timeout"
    assert kube.state.pods == {} and kube.state.config_maps == {}


def test_a_build_pod_is_bounded_in_time_and_in_local_disk(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    cluster = CLUSTER.model_copy(update={"build_timeout_s": 900})
    backend = ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path, build_poll_s=0.01)
    kube.state.on_pod_created = lambda pod_: pod_.update(status={"phase": "Succeeded"})
    created = []
    kube.state.intercept = lambda r: created.append(r.body) if r.method == "POST" else None

    backend.build_image(build_context(tmp_path / "images" / "b"), "registry.example/e:b")

    [pod_] = [b for b in created if b.get("kind") == "Pod"]
    [main] = pod_["spec"]["containers"]
    assert pod_["spec"]["activeDeadlineSeconds"] == 900
    assert main["resources"]["requests"]["ephemeral-storage"] == "20Gi"
    assert main["resources"]["limits"]["ephemeral-storage"] == "20Gi"


def test_a_rebuild_after_the_secret_was_fixed_does_not_fail_on_the_earlier_pods_events(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    cluster = CLUSTER.model_copy(update={"pull_secret": "simrun-registry"})
    backend = ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path, build_poll_s=0.01)
    ref = "registry.example/simrun-env:abc"
    with pytest.raises(RuntimeError, match="FailedMount"):
        backend.build_image(build_context(tmp_path / "images" / "abc"), ref)
    registry_secret(kube, "simrun-build")  # the operator fixed it; the events are still there
    pod_path = f"/api/v1/namespaces/simrun-build/pods/{build_pod_name(ref)}"
    reads = []

    def runs_on_its_second_look(request: Request) -> None:
        if request.method == "GET" and request.path == pod_path:
            reads.append(request)
            pod_ = kube.state.pods.get(("simrun-build", build_pod_name(ref)))
            if len(reads) == 2 and pod_ is not None:
                pod_["status"] = {"phase": "Succeeded"}
        return None

    kube.state.intercept = runs_on_its_second_look

    backend.build_image(build_context(tmp_path / "images" / "abc"), ref)


def test_a_build_with_the_registry_secret_where_the_build_runs_starts(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    cluster = CLUSTER.model_copy(update={"pull_secret": "simrun-registry"})
    backend = ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path, build_poll_s=0.01)
    registry_secret(kube, "simrun-build")
    kube.state.on_pod_created = lambda pod_: pod_.update(status={"phase": "Succeeded"})

    backend.build_image(build_context(tmp_path / "images" / "abc"), "registry.example/e:abc")


def test_a_build_whose_builder_image_cannot_be_pulled_fails_at_once_with_the_reason(
    backend: ArgoBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    kube.state.unpullable.add(CLUSTER.builder_image)

    with pytest.raises(RuntimeError, match="cannot start: main: ImagePullBackOff: Back-off"):
        backend.build_image(build_context(tmp_path / "images" / "abc"), "registry.example/e:x")


def test_a_build_started_before_is_waited_for_not_started_again(
    backend: ArgoBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    ref = "registry.example/simrun-env:abc"
    name = build_pod_name(ref)
    kube.state.put_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "simrun-build"},
            "spec": {"containers": [{"name": "main", "image": CLUSTER.builder_image}]},
            "status": {"phase": "Running"},
        }
    )
    reads = []

    def finish_on_the_third_read(request: Any) -> None:
        if request.method == "GET" and request.path.endswith(f"/pods/{name}"):
            reads.append(request)
            if len(reads) == 3:
                kube.state.pods[("simrun-build", name)]["status"]["phase"] = "Succeeded"

    kube.state.intercept = finish_on_the_third_read

    backend.build_image(build_context(tmp_path / "images" / "abc"), ref)

    assert [r.path for r in kube.state.requests if r.method == "POST"] == [
        "/api/v1/namespaces/simrun-build/configmaps"
    ]
    assert len(reads) == 3


def test_two_runs_building_one_image_share_the_build_and_the_last_one_out_cleans_up(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    cluster = CLUSTER.model_copy(update={"build_timeout_s": 6})
    # The second run looks at its pod every 3 s: the first one joins, finds the build done
    # and leaves while the second one waits, as a long build's submissions do.
    waiting = ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path, build_poll_s=3)
    joining = ArgoBackend(cluster=cluster, api=kube.client(), store=tmp_path, build_poll_s=0.01)
    ref = "registry.example/simrun-env:abc"
    key = ("simrun-build", build_pod_name(ref))
    made: list[dict] = []
    kube.state.on_pod_created = made.append  # the pod builds until the test says it is done
    context = build_context(tmp_path / "images" / "abc")
    ended: list[BaseException | None] = []

    def wait_for_the_build() -> None:
        try:
            waiting.build_image(context, ref)
        except BaseException as error:  # noqa: BLE001 - what the build met is the result
            ended.append(error)
        else:
            ended.append(None)

    thread = threading.Thread(target=wait_for_the_build)
    thread.start()
    wait_for(lambda: made, 10, "the waiting run's build pod")
    kube.state.pods[key]["status"] = {"phase": "Succeeded"}

    joining.build_image(context, ref)

    assert key in kube.state.pods and key in kube.state.config_maps, "the other one still waits"
    thread.join(timeout=30)
    assert ended == [None], "the waiting run saw its build vanish"
    assert len(made) == 1, "one pod built the image for both"
    assert key not in kube.state.pods and key not in kube.state.config_maps
    waiting.close()
    joining.close()


def test_a_run_joining_as_the_last_one_leaves_keeps_the_build_and_its_context(
    backend: ArgoBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    ref = "registry.example/simrun-env:abc"
    key = ("simrun-build", build_pod_name(ref))
    kube.state.on_pod_created = lambda pod_: pod_.update(status={"phase": "Succeeded"})
    joined: list[str] = []

    def join_at_the_first_delete(request: Any) -> None:
        if request.method == "DELETE" and not joined:
            # Another submission marks the context between the leaver's read and its deletes.
            config_map = kube.state.config_maps[key]
            config_map["metadata"]["annotations"]["simrun/build-joiner-late"] = "9999999999"
            kube.state.stamp(config_map)
            joined.append(request.path)

    kube.state.intercept = join_at_the_first_delete

    backend.build_image(build_context(tmp_path / "images" / "abc"), ref)

    assert joined, "the last one out deleted something"
    assert key in kube.state.config_maps, "the joiner's context was deleted under it"
    assert key in kube.state.pods, "the build the joiner waits for was deleted"


def test_a_build_left_by_a_process_that_died_long_ago_does_not_keep_its_pod(
    backend: ArgoBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    ref = "registry.example/simrun-env:abc"
    key = ("simrun-build", build_pod_name(ref))

    def done_and_a_dead_joiner(pod_: dict) -> None:
        pod_["status"] = {"phase": "Succeeded"}
        annotations = kube.state.config_maps[key]["metadata"]["annotations"]
        annotations["simrun/build-joiner-dead"] = "1000"  # 1970: its process is long gone

    kube.state.on_pod_created = done_and_a_dead_joiner

    backend.build_image(build_context(tmp_path / "images" / "abc"), ref)

    assert key not in kube.state.pods and key not in kube.state.config_maps


def test_a_build_context_without_a_dockerfile_is_refused(
    backend: ArgoBackend, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ValueError, match="no Dockerfile"):
        backend.build_image(tmp_path / "elsewhere", "registry.example/x:1")


# Configuration


def write_kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "loop", "cluster": {"server": server}}],
                "users": [{"name": "simrun", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "simrun"}}],
                "current-context": "loop",
            }
        )
    )
    return path


def test_outside_a_cluster_without_a_kubeconfig_setting_the_users_kubeconfig_is_used(
    kube: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    write_kubeconfig(tmp_path / ".kube" / "config", kube.url)
    kube.state.tokens["secret-token"] = ("simrun", "simrun-worker")
    kube.state.put_workflow(workflow(Nodes()), "ADDED")

    backend = ArgoBackend(cluster=CLUSTER, api=api_client(), store=tmp_path)

    assert backend.status(WF).phase == "Running"


def test_a_kubeconfig_of_the_settings_reaches_the_cluster(
    kube: KubeApiServer, tmp_path: Path, settings: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    kube.state.tokens["secret-token"] = ("simrun", "simrun-worker")
    settings.SIMRUN_CLUSTER = {**settings.SIMRUN_CLUSTER, "kubeconfig": str(kubeconfig)}
    kube.state.put_workflow(workflow(Nodes()), "ADDED")

    backend = ArgoBackend.from_settings()

    assert backend.status(WF).phase == "Running"
    assert backend.store == settings.SIMRUN_STORE
    [request] = kube.state.requests
    assert request.path == "/apis/argoproj.io/v1alpha1/namespaces/simrun/workflows/" + WF
    assert request.authorization == "Bearer secret-token"
