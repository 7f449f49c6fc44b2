"""Nodes on a cluster as operators run one: which a run may reserve, which node it gets, the
largest task a node can hold, against the loopback API with nodes as the API server writes
them (a tainted control plane, a GPU pool, a pool marked for simrun)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.nodes import POOL_LABEL, RESERVABLE
from runs.backends.base import ClusterConfig, NodeInfo, TaskPlan
from runs.backends.nodes import choose_node
from runs.control import submitting
from runs.models import Run, RunState
from runs.planning.planner import plan_run
from runs.planning.spec import SpecError
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.backends.argo_runs import run_of
from tests.backends.argo_workflows import WF
from tests.backends.kube_api import KubeApiServer, Request

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
RESERVED = "simrun/reserved"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"


def node(
    name: str,
    *,
    cpu: str,
    memory: str,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A node as the API server returns it: labels of the kubelet, allocatable, conditions."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": {"podCIDR": "10.244.0.0/24", **({"taints": taints} if taints else {})},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                },
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        },
    }


def control_plane() -> dict[str, Any]:
    return node(
        "cp-1",
        cpu="16",
        memory="65856512Ki",
        labels={CONTROL_PLANE: ""},
        taints=[{"key": CONTROL_PLANE, "effect": "NoSchedule"}],
    )


def pool(name: str, cpu: str, memory: str, **labels: str) -> dict[str, Any]:
    return node(name, cpu=cpu, memory=memory, labels={POOL_LABEL: "sims", **labels})


def gpu_node() -> dict[str, Any]:
    return node(
        "gpu-1",
        cpu="64",
        memory="263921664Ki",
        labels={POOL_LABEL: "sims"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )


def backend_of(kube: KubeApiServer, tmp_path: Path, **cluster: Any) -> ArgoBackend:
    config = CLUSTER.model_copy(update=cluster)
    return ArgoBackend(cluster=config, api=kube.client(), store=tmp_path, capacity_ttl_s=60)


def put(kube: KubeApiServer, *nodes: dict[str, Any]) -> None:
    for item in nodes:
        kube.state.put_node(item)


def roomy_queue(kube: KubeApiServer) -> None:
    """A ClusterQueue whose quota for one pod is larger than every node: the nodes cap."""
    [group] = kube.state.cluster_queues["simrun"]["spec"]["resourceGroups"]
    cpu, memory, _ = group["flavors"][0]["resources"]
    cpu["nominalQuota"], memory["nominalQuota"] = 1000, "4Ti"


# Reservable nodes


def test_only_nodes_marked_for_simrun_without_foreign_taints_are_reservable(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    worker = node("worker-1", cpu="8", memory="32Gi")  # not marked: other teams' pods run there
    drained = pool("pool-2", "8", "32Gi")
    drained["spec"]["taints"] = [{"key": "maintenance", "effect": "NoExecute"}]
    soft = pool("pool-3", "8", "32Gi")
    soft["spec"]["taints"] = [{"key": "spot", "effect": "PreferNoSchedule"}]
    put(kube, control_plane(), gpu_node(), worker, pool("pool-1", "8", "32Gi"), drained, soft)

    nodes = {n.name: n.reservable for n in backend_of(kube, tmp_path).nodes()}

    assert nodes == {
        "cp-1": False,
        "gpu-1": False,
        "worker-1": False,
        "pool-1": True,
        "pool-2": False,
        "pool-3": True,
    }


def test_with_a_node_selector_its_nodes_are_marked_but_never_a_control_plane(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    untainted_control_plane = node("cp-1", cpu="16", memory="64Gi", labels={CONTROL_PLANE: ""})
    untainted_control_plane["metadata"]["labels"]["team"] = "sims"
    put(kube, untainted_control_plane, node("w-1", cpu="8", memory="32Gi", labels={"team": "sims"}))

    nodes = backend_of(kube, tmp_path, node_selector={"team": "sims"}).nodes()

    assert {n.name: n.reservable for n in nodes} == {"cp-1": False, "w-1": True}


def test_a_node_reserved_by_another_run_stays_reservable_once_released(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    held = pool("pool-1", "8", "32Gi", **{RESERVED: "run0"})
    held["spec"]["taints"] = [{"key": RESERVED, "value": "run0", "effect": "NoExecute"}]
    put(kube, held)

    [info] = backend_of(kube, tmp_path).nodes()

    assert (info.reservable, info.reserved_by) == (True, "run0")


# The choice


def plans(cores: int, memory_gb: float, retry_gb: float | None = None) -> dict[str, TaskPlan]:
    plan = TaskPlan(
        cores=cores,
        memory_gb=memory_gb,
        workers=1,
        base_gb=0,
        per_worker_gb=memory_gb,
        processes=1,
        retry_memory_gb=retry_gb or memory_gb * 2,
    )
    small = plan.model_copy(update={"cores": 1, "memory_gb": 1.0, "retry_memory_gb": 2.0})
    return {"big": plan, "small": small}


def info(name: str, cores: float, memory_gb: float, **fields: Any) -> NodeInfo:
    return NodeInfo(name=name, cores=cores, memory_gb=memory_gb, **fields)


def test_the_smallest_free_node_that_fits_the_largest_task_is_chosen() -> None:
    nodes = [
        info("huge", 64, 256),
        info("small", 4, 16),
        info("medium", 16, 64),
        info("large", 32, 128),
        info("cp", 2, 100, reservable=False),
        info("held", 16, 64, reserved_by="run0"),
        info("down", 16, 64, ready=False),
    ]

    assert choose_node(nodes, plans(8, 20, retry_gb=40)) == "medium"
    assert choose_node(nodes, plans(8, 20, retry_gb=100)) == "large", "room for the retry"
    assert choose_node(nodes, plans(8, 20, retry_gb=999)) == "medium", "none fits the retry"
    assert choose_node(nodes, plans(8, 20), taken=["medium"]) == "large"


def test_no_node_that_fits_is_refused_with_the_numbers() -> None:
    with pytest.raises(LookupError) as raised:
        choose_node([info("a", 8, 32), info("b", 4, 64)], plans(16, 20))

    assert str(raised.value) == (
        "no free node fits the run's largest task (16 cores, 20 GiB): "
        "the free nodes have at most 8 cores and 64.0 GiB"
    )


def test_no_reservable_node_is_refused_saying_how_to_mark_one() -> None:
    with pytest.raises(LookupError, match=POOL_LABEL):
        choose_node([info("cp", 16, 64, reservable=False)], plans(1, 1), reservable=RESERVABLE)


# The largest task a node can hold


def test_the_caps_are_the_largest_node_the_pods_may_use_and_read_once_a_while(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    put(kube, control_plane(), gpu_node(), pool("pool-1", "7910m", "31893100Ki"))
    put(kube, node("worker-1", cpu="4", memory="64Gi"))
    roomy_queue(kube)
    backend = backend_of(kube, tmp_path)

    assert (backend.max_cores, backend.max_memory_gb) == (7, 63.93)  # Argo's wait beside
    assert backend.max_cores == 7
    assert len([r for r in kube.state.requests if r.path == "/api/v1/nodes"]) == 1

    kube.state.put_node(pool("pool-2", "32", "128Gi"))
    backend.capacity.ttl_s = 0  # the next read refreshes

    assert (backend.max_cores, backend.max_memory_gb) == (31, 127.93)


def test_the_caps_are_unknown_while_the_cluster_does_not_answer_after_one_try(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    put(kube, pool("pool-1", "8", "32Gi"))
    backend = backend_of(kube, tmp_path)
    kube.state.intercept = lambda request: 503

    assert backend.max_memory_gb is None
    assert [r.path for r in kube.state.requests] == [
        "/api/v1/nodes",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/simrun/localqueues/simrun",
    ], "a web request planning a run tries each once: it does not wait"

    kube.state.intercept = None
    capacity = backend.capacity
    capacity._sizes_at = (capacity._sizes_at or 0) - 30  # the short wait after a failure
    capacity._quota_at = (capacity._quota_at or 0) - 30

    assert backend.max_memory_gb == 31.93


def test_a_plan_is_capped_by_the_nodes_so_its_retry_memory_fits_one(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    put(kube, pool("pool-1", "32", "64Gi"))
    roomy_queue(kube)
    backend = backend_of(kube, tmp_path)
    spec = parse_spec(
        "tasks: {solve: {command: [solve], cores: 64, memory: {gb: 40}}}", types=task_types()
    )

    plan = plan_run(
        spec,
        types=task_types(),
        max_cores=backend.max_cores,
        max_memory_gb=backend.max_memory_gb,
    )["solve"]

    assert (plan.cores, plan.memory_gb, plan.retry_memory_gb) == (31, 40, 63.93)


def test_a_task_capped_at_the_largest_node_is_scheduled_there_beside_argos_wait_container(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    put(kube, pool("pool-1", "8", "32Gi"))
    roomy_queue(kube)
    backend = backend_of(kube, tmp_path)
    text = "tasks: {solve: {command: [solve], cores: 64, memory: {gb: 100}}}"
    record, _ = run_of(text)
    capped = plan_run(
        parse_spec(text, types=task_types()),
        types=task_types(),
        max_cores=backend.max_cores,
        max_memory_gb=backend.max_memory_gb,
    )

    backend.submit(record, capped, task_types(), CLUSTER)
    [first] = kube.state.argo_creates_pods("simrun", WF)

    conditions = (first.get("status") or {}).get("conditions") or []
    assert not [c for c in conditions if c.get("reason") == "Unschedulable"], conditions


def test_a_task_no_node_can_hold_is_refused_at_submission_with_the_numbers(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    put(kube, pool("wide", "32", "16Gi"), pool("deep", "8", "256Gi"))
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of("tasks: {solve: {command: [solve], cores: 16, memory: {gb: 100}}}")

    with pytest.raises(ValueError) as raised:
        backend.submit(record, task_plans, task_types(), CLUSTER)

    assert str(raised.value) == (
        "task solve needs 16 cores and 100 GiB (200 GiB for its retry after a kill for "
        "memory) on one node beside Argo's wait container (0.01 cores, 64 MiB), which no node "
        "simrun may use has (the largest have 32 cores and 256.0 GiB)"
    )
    assert kube.state.workflows == {}


# The ClusterQueue's quota for one pod


QUOTA_NAME = "the quota of the ClusterQueue simrun for one pod (beside Argo's wait container)"


@pytest.mark.django_db
def test_a_task_asking_more_than_the_queues_quota_for_one_pod_is_a_400_naming_it(
    kube: KubeApiServer, tmp_path: Path, owner: Any
) -> None:
    """The ClusterQueue of docker/k8s/ gives one pod 32 cores and 128 GiB; Argo's wait container
    (0.01 cores, 64 MiB) runs beside the task's main: a pod asking 32 cores or 128 GiB would be
    held by Kueue for ever, on a node that holds it."""
    put(kube, pool("huge", "64", "512Gi"))
    backend = backend_of(kube, tmp_path)
    text = "tasks: {solve: {command: [solve], cores: 32, memory: {gb: 128}}}"

    with pytest.raises(SpecError) as raised:
        create_run(spec=parse_spec(text, types=task_types()), owner=owner, backend=backend)

    assert raised.value.errors == {
        "tasks.solve.cores": [f"task solve asks 32 cores but {QUOTA_NAME} has 31"],
        "tasks.solve.memory.gb": [
            f"task solve asks 128 GiB of memory but {QUOTA_NAME} has 127.9 GiB"
        ],
    }
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_retry_memory_is_capped_at_the_queues_quota_for_one_pod(
    kube: KubeApiServer, tmp_path: Path, owner: Any
) -> None:
    """simrun's own margin after a kill for memory (1.5 × 100 GiB) is capped, as at the largest
    node, not refused: the user asked 100 GiB, which the queue admits."""
    put(kube, pool("huge", "64", "512Gi"))
    backend = backend_of(kube, tmp_path)
    text = "tasks: {solve: {command: [solve], memory: {gb: 100}}}"

    run = create_run(spec=parse_spec(text, types=task_types()), owner=owner, backend=backend)

    plan = run.tasks.get(task_id="solve").plan
    assert (plan["memory_gb"], plan["retry_memory_gb"]) == (100, 127.93)
    assert f"capped at 127.93 GiB, {QUOTA_NAME}" in plan["why"]


def test_the_worker_refuses_a_plan_whose_retry_or_whole_pod_the_queue_cannot_admit(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    """A plan made while the quota was not known (or was larger) is refused at its submission."""
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of("tasks: {solve: {command: [solve], memory: {gb: 100}}}")
    plan = task_plans["solve"]
    task_plans["solve"] = plan.model_copy(update={"retry_memory_gb": 128.0})

    with pytest.raises(ValueError) as raised:
        backend.submit(record, task_plans, task_types(), CLUSTER)

    assert str(raised.value) == (
        f"task solve needs {plan.cores} cores, 100 GiB (128 GiB for its retry after a kill for "
        "memory) and 10 GiB of scratch in one pod, beside Argo's wait container (0.01 cores, 64 "
        "MiB): more than the ClusterQueue of the LocalQueue simrun admits for one pod in any of "
        "its flavors (at most, flavor by flavor: 32 cores, 128.0 GiB, 1024 GiB of scratch): "
        "Kueue would hold it forever"
    )
    assert kube.state.workflows == {}


def flavored(kube: KubeApiServer, *flavors: tuple[str, int, str]) -> None:
    """The runs' ClusterQueue with these flavors (name, cores, memory) in its one group."""
    [group] = kube.state.cluster_queues["simrun"]["spec"]["resourceGroups"]
    group["flavors"] = [
        {
            "name": name,
            "resources": [
                {"name": "cpu", "nominalQuota": cores},
                {"name": "memory", "nominalQuota": memory},
                {"name": "ephemeral-storage", "nominalQuota": "1Ti"},
            ],
        }
        for name, cores, memory in flavors
    ]


def gated_pod(kube: KubeApiServer) -> dict[str, Any]:
    """Create the first pod of the submitted Workflow, as Argo does: Kueue takes it."""
    [first] = kube.state.argo_creates_pods("simrun", WF)
    return kube.state.pods[("simrun", first["metadata"]["name"])]


def test_a_task_no_one_flavor_holds_is_refused_though_each_resource_fits_some_flavor(
    kube: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flavored(kube, ("wide", 64, "16Gi"), ("deep", 4, "256Gi"))
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of("tasks: {solve: {command: [solve], cores: 16, memory: {gb: 100}}}")
    plans = {"solve": task_plans["solve"].model_copy(update={"retry_memory_gb": 100.0})}

    with pytest.raises(ValueError, match="in any of its flavors"):
        backend.submit(record, plans, task_types(), CLUSTER)
    assert kube.state.workflows == {}

    # Kueue itself would never admit that pod (the check left out to show it).
    monkeypatch.setattr("runs.backends.argo.capacity.admits", lambda groups, requests: True)
    backend.submit(record, plans, task_types(), CLUSTER)
    assert gated_pod(kube)["spec"].get("schedulingGates"), "held by Kueue for ever"


def test_the_refusal_quotes_what_each_flavor_gives_one_pod_not_a_mix_of_them(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    flavored(kube, ("wide", 64, "16Gi"), ("deep", 4, "256Gi"))
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of("tasks: {solve: {command: [solve], cores: 16, memory: {gb: 100}}}")
    plans = {"solve": task_plans["solve"].model_copy(update={"retry_memory_gb": 100.0})}

    with pytest.raises(ValueError) as raised:
        backend.submit(record, plans, task_types(), CLUSTER)

    assert str(raised.value).endswith(
        "in any of its flavors (at most, flavor by flavor: 64 cores, 16.0 GiB, 1024 GiB of "
        "scratch; 4 cores, 256.0 GiB, 1024 GiB of scratch): Kueue would hold it forever"
    )


def test_the_caps_cut_no_task_one_flavor_admits_and_the_pod_is_checked_whole(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    """The planner's caps are the most some flavor gives of each resource (Argo's wait container
    beside the task's main): a task asking the cores of "wide" is not cut to those of "deep".
    A pod no one flavor holds whole is refused by the check of the pod (``admits``)."""
    put(kube, pool("huge", "128", "512Gi"))
    flavored(kube, ("wide", 64, "16Gi"), ("deep", 4, "256Gi"))
    backend = backend_of(kube, tmp_path)

    assert (backend.capacity.max_cores, backend.capacity.max_memory_gb) == (63, 255.93)
    _, wide = run_of("tasks: {sim: {command: ['true'], cores: 16, memory: {gb: 4}}}")
    backend.capacity.check_cluster(wide)
    _, neither = run_of("tasks: {sim: {command: ['true'], cores: 16, memory: {gb: 100}}}")
    with pytest.raises(ValueError, match="flavor by flavor"):
        backend.capacity.check_cluster(neither)


def test_a_sweep_makes_as_many_pods_at_once_as_the_flavors_hold_together(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    """One-core, 1 GiB workers (1.01 cores, 1 GiB 64 MiB with Argo's wait container): 15 in
    "wide" (by its memory), 3 in "deep" (by its cores); not 63, the mixed quota's."""
    flavored(kube, ("wide", 64, "16Gi"), ("deep", 4, "256Gi"))
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of(
        "tasks: {sweep: {type: squares, settings: {n: 100000}, workers: 1000, cores: 1, "
        "memory: {gb: 1}}}"
    )

    backend.submit(record, task_plans, task_types(), CLUSTER)

    [(_, sweep)] = kube.state.workflows.items()
    assert sweep["spec"]["parallelism"] == 18


def test_in_a_cohort_a_queue_without_a_borrowing_limit_borrows_without_limit(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    flavored(kube, ("simrun-flavor", 8, "128Gi"))
    queue = kube.state.cluster_queues["simrun"]
    queue["spec"]["cohortName"] = "lab"
    other = json.loads(json.dumps(queue))
    other["metadata"]["name"] = "other"
    other["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 64
    kube.state.cluster_queues["other"] = other
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of("tasks: {solve: {command: [solve], cores: 16, memory: {gb: 4}}}")

    backend.submit(record, task_plans, task_types(), CLUSTER)

    assert not gated_pod(kube)["spec"].get("schedulingGates"), "Kueue admits it, borrowing"


# Reserving in a submission


@pytest.mark.django_db
def test_a_submission_that_loses_its_node_to_another_run_reserves_the_next(
    kube: KubeApiServer, tmp_path: Path, owner: Any, settings: Any
) -> None:
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    put(kube, control_plane(), pool("pool-small", "4", "16Gi"), pool("pool-big", "16", "64Gi"))
    backend = backend_of(kube, tmp_path)
    text = yaml.safe_dump(
        {"reserve_node": True, "tasks": {"sweep": {"type": "squares", "settings": {"n": 4}}}}
    )
    run = create_run(spec=parse_spec(text, types=task_types()), owner=owner, backend=backend)

    def other_run_first(request: Request) -> int | None:
        if request.method == "GET" and request.path == "/api/v1/nodes/pool-small":
            taken = kube.state.nodes["pool-small"]
            if RESERVED not in taken["metadata"]["labels"]:
                taken["metadata"]["labels"][RESERVED] = "otherrun01"
                taken["spec"]["taints"] = [
                    {"key": RESERVED, "value": "otherrun01", "effect": "NoExecute"}
                ]
                kube.state.stamp(taken)
        return None

    kube.state.intercept = other_run_first

    assert submitting.submit(run.id, backend=backend)

    run = Run.objects.get(pk=run.pk)
    assert (run.state, run.reserved_node) == (RunState.RUNNING, "pool-big")
    assert kube.state.nodes["pool-big"]["metadata"]["labels"][RESERVED] == run.id
    assert kube.state.nodes["pool-small"]["metadata"]["labels"][RESERVED] == "otherrun01"
    [(_, workflow)] = kube.state.workflows.items()
    assert workflow["spec"]["nodeSelector"] == {RESERVED: run.id}


def test_a_sweep_makes_no_more_pods_at_once_than_the_queue_could_ever_admit(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of(
        "tasks: {sweep: {type: squares, settings: {n: 100000}, workers: 1000, cores: 1}}"
    )
    small = run_of("tasks: {sweep: {type: squares, settings: {n: 100}, workers: 2, cores: 1}}")

    backend.submit(record, task_plans, task_types(), CLUSTER)
    [(_, sweep)] = kube.state.workflows.items()
    kube.state.workflows.clear()
    backend.submit(*small, task_types(), CLUSTER)
    [(_, few)] = kube.state.workflows.items()

    # 32 cores in docker/k8s/30-kueue.yaml, 1.01 a pod with Argo's wait container.
    assert sweep["spec"]["parallelism"] == 31
    assert "parallelism" not in few["spec"], "no cap where the queue holds every pod"


def test_the_runners_token_is_in_argos_containers_and_out_of_reach_of_a_tasks_code(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_of(kube, tmp_path)
    record, task_plans = run_of(
        "tasks: {sweep: {type: squares, settings: {n: 10}}, "
        "plot: {command: [python, /app/plot.py], inputs: {data: sweep}}}"
    )
    backend.submit(record, task_plans, task_types(), CLUSTER)

    pods = kube.state.argo_creates_pods("simrun", WF)

    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    for made in pods:
        spec = kube.state.pods[("simrun", made["metadata"]["name"])]["spec"]
        containers = [*spec.get("initContainers", []), *spec["containers"]]
        mounted = {
            c["name"]: next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == token)
            for c in containers
        }
        assert mounted.pop("wait") == mounted.pop("init") == "kube-api-access"
        assert set(mounted.values()) == {"no-token"}, mounted
