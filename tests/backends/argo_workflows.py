"""Realistic Argo Workflow objects, as the controller of Argo v4.1 writes them.

Node ids are ``<wf>-<fnv1a32(name)>`` as Argo computes them, names and types follow
Argo's docs: a DAG task with a retry strategy is a Retry node with Pod children
``(<n>)`` flagged ``retried``; a fan-out is a TaskGroup with children ``(<i>:<item>)``.
"""

from __future__ import annotations

from typing import Any

from tests.backends.argo_runs import IMAGE

WF = "simrun-abc123def0"


def fnv1a_32(text: str) -> int:
    value = 2166136261
    for byte in text.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return value


def node_id(name: str) -> str:
    return WF if name == WF else f"{WF}-{fnv1a_32(name)}"


class Nodes:
    """A ``status.nodes`` map built up node by node."""

    def __init__(self, phase: str = "Running") -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self._add(WF, "DAG", phase, template="Run")

    def _add(
        self, name: str, kind: str, phase: str, *, template: str = "", **fields: Any
    ) -> dict[str, Any]:
        node = {
            "id": node_id(name),
            "name": name,
            "displayName": name.rsplit(".", 1)[-1],
            "type": kind,
            "phase": phase,
            "boundaryID": WF if name != WF else "",
            "templateScope": f"local/{WF}",
            "startedAt": "2026-11-29T10:00:00Z",
            **fields,
        }
        if template:
            node["templateName"] = template
        if phase in {"Succeeded", "Failed", "Error", "Omitted", "Skipped"}:
            node["finishedAt"] = "2026-11-29T10:05:00Z"
        if name == WF:
            node.pop("boundaryID")
        self.nodes[node["id"]] = node
        return node

    def task(
        self, task: str, phase: str, attempts: list[dict[str, Any]], *, message: str = ""
    ) -> None:
        """A DAG task with a retry strategy: its Retry node and its attempts."""
        self._retry(f"{WF}.{task}", task.split("(")[0], phase, attempts, message)

    def fan_out(self, task: str, phase: str, children: dict[str, tuple[str, list[dict]]]) -> None:
        """A fanned-out DAG task: its TaskGroup and, by ``(<i>:<item>)``, each child's Retry."""
        group = self._add(f"{WF}.{task}", "TaskGroup", phase, template=task)
        group["children"] = []
        for suffix, (child_phase, attempts) in children.items():
            retry = self._retry(f"{WF}.{task}{suffix}", task, child_phase, attempts, "")
            item = suffix.strip("()").split(":")[1]
            worker = f"{task.removesuffix('-extra')}-w{item}"
            retry["inputs"] = {"parameters": [{"name": "worker", "value": worker}]}
            group["children"].append(retry["id"])

    def skipped(self, task: str, phase: str = "Omitted") -> None:
        self._add(f"{WF}.{task}", "Skipped", phase, message="omitted: depends condition not met")

    def _retry(
        self, name: str, template: str, phase: str, attempts: list[dict[str, Any]], message: str
    ) -> dict[str, Any]:
        retry = self._add(name, "Retry", phase, template=template)
        if message:
            retry["message"] = message
        retry["children"] = []
        for number, attempt in enumerate(attempts):
            pod = self._add(
                f"{name}({number})",
                "Pod",
                attempt["phase"],
                template=template,
                nodeFlag={"retried": True},
                **{k: v for k, v in attempt.items() if k != "phase"},
            )
            retry["children"].append(pod["id"])
        return retry


def pod(phase: str, *, message: str = "", exit_code: str | None = None, host: str = "") -> dict:
    """An attempt: a Pod node's phase, message, exit code and host."""
    attempt: dict[str, Any] = {"phase": phase}
    if message:
        attempt["message"] = message
    if exit_code is not None:
        attempt["outputs"] = {"exitCode": exit_code}
    if host:
        attempt["hostNodeName"] = host
    if phase in {"Succeeded", "Failed"}:
        attempt["resourcesDuration"] = {"cpu": 12, "memory": 7}
    return attempt


def workflow(nodes: Nodes, phase: str = "Running", message: str = "") -> dict[str, Any]:
    """The Workflow object around a node map."""
    status: dict[str, Any] = {
        "phase": phase,
        "startedAt": "2026-11-29T10:00:00Z",
        "nodes": nodes.nodes,
        "progress": "1/4",
    }
    if message:
        status["message"] = message
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": WF,
            "namespace": "simrun",
            "labels": {
                "simrun/run": "abc123def0",
                "workflows.argoproj.io/phase": phase,
                "workflows.argoproj.io/completed": "false",
            },
            "annotations": {"workflows.argoproj.io/pod-name-format": "v2"},
            "resourceVersion": "4242",
            "uid": "3f0c2f5e-0000-4000-8000-000000000001",
            "creationTimestamp": "2026-11-29T10:00:00Z",
        },
        "spec": {
            "entrypoint": "Run",
            "templates": [
                {"name": "Run", "dag": {"tasks": [{"name": "sweep-w0", "template": "sweep-w0"}]}},
                {"name": "sweep-w0", "container": {"image": IMAGE}},
            ],
        },
        "status": status,
    }


OOM = "main: OOMKilled (exit code 137)"
POD_DELETED = "pod deleted"
LOW_MEMORY = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
    "Container main was using 3Gi, request is 2Gi, has larger consumption of memory. "
)
SIGTERM = "main: Error (exit code 143)"
UNIT_FAILED = "main: Error (exit code 3)"


def argo_pod(
    name: str,
    *,
    node_name: str,
    phase: str,
    task: str = "sweep",
    dag_task: str = "sweep-w0",
    worker: str | None = "sweep-w0",
    attempt: int = 0,
    host: str | None = None,
    created: str = "2026-11-29T10:00:00Z",
    cores: str = "2",
    memory: str = "512Mi",
) -> dict[str, Any]:
    """A pod as Argo creates it for a node of the workflow."""
    env = [
        {"name": "SIMRUN_TASK_DIR", "value": f"/store/runs/abc123def0/tasks/{task}"},
        {"name": "SIMRUN_ATTEMPT", "value": str(attempt)},
    ]
    if worker:
        env.append({"name": "SIMRUN_WORKER", "value": worker})
    status: dict[str, Any] = {"phase": phase}
    if phase == "Pending":
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "simrun",
            "creationTimestamp": created,
            "labels": {
                "workflows.argoproj.io/workflow": WF,
                "workflows.argoproj.io/completed": "false",
                "simrun/run": "abc123def0",
                "simrun/task": task,
                "simrun/dag-task": dag_task,
                "kueue.x-k8s.io/queue-name": "simrun",
            },
            "annotations": {
                "workflows.argoproj.io/node-name": f"{WF}.{node_name}",
                "kubectl.kubernetes.io/default-container": "main",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeName": host,
            "containers": [
                {
                    "name": "wait",
                    "image": "quay.io/argoproj/argoexec:v4.1.2",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                },
                {
                    "name": "main",
                    "image": IMAGE,
                    "command": ["simrun-worker"],
                    "env": env,
                    "resources": {
                        "requests": {"cpu": cores, "memory": memory},
                        "limits": {"cpu": cores, "memory": memory},
                    },
                },
            ],
        },
        "status": status,
    }


def kube_node(name: str, *, labels: dict | None = None, taints: list | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints is not None else {},
        "status": {
            "allocatable": {"cpu": "7910m", "memory": "31893100Ki", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def container_status(name: str, **state: Any) -> dict[str, Any]:
    """The status of a container as the kubelet writes it, in ``state`` (``waiting={…}``)."""
    return {
        "name": name,
        "image": IMAGE,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
    }


def gated_pod(name: str, node_name: str, uid: str) -> dict[str, Any]:
    """A pod Kueue holds back: its scheduling gate and PodScheduled SchedulingGated."""
    found = argo_pod(name, node_name=node_name, phase="Pending", dag_task=node_name.split("(")[0])
    found["metadata"]["uid"] = uid
    found["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    found["status"]["conditions"][0]["message"] = "Scheduling is blocked due to non-empty gates"
    return found


def workload(pod_name: str, uid: str, conditions: list[dict[str, str]]) -> dict[str, Any]:
    """The Kueue Workload of a pod, as Kueue's pod integration writes it."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"pod-{pod_name}-4f1c2",
            "namespace": "simrun",
            "labels": {"kueue.x-k8s.io/job-uid": uid, "kueue.x-k8s.io/queue-name": "simrun"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid}],
        },
        "spec": {"queueName": "simrun", "podSets": [{"name": "main", "count": 1}]},
        "status": {"conditions": conditions},
    }
