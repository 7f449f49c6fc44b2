"""Kueue's pod integration, for the strict stand-in (``kube_api``): its webhook and its quota.

A pod created with the label ``kueue.x-k8s.io/queue-name`` in a namespace Kueue manages
(``managed-by-kueue: "true"``, docs/cluster.md) gets the scheduling gate
``kueue.x-k8s.io/admission``, the label ``kueue.x-k8s.io/managed`` and Kueue's finalizer,
and one Workload of its own (labelled with the pod's uid). Workloads are admitted in the order
they came while their ClusterQueue's quota holds their requests: an admitted pod loses its
gate (and goes on to the kubelet); one that does not fit stays gated, its Workload saying why
in Kueue's words (a resource the ClusterQueue does not cover, quota short).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GATE = "kueue.x-k8s.io/admission"
JOB_UID = "kueue.x-k8s.io/job-uid"
TERMINAL = frozenset({"Succeeded", "Failed"})


def pod_requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """What a pod requests, as Kueue charges it: its containers summed, each init container's
    own requests when larger (init containers run one at a time)."""
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + _quantity(value)
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Decimal(0)), _quantity(value))
    return total


def webhook(pod: dict[str, Any], managed: bool) -> bool:
    """Kueue's pod webhook: gate and label a pod it manages; whether it does."""
    labels = pod["metadata"].setdefault("labels", {})
    if not managed or QUEUE_LABEL not in labels:
        return False
    labels["kueue.x-k8s.io/managed"] = "true"
    pod["metadata"].setdefault("finalizers", []).append("kueue.x-k8s.io/managed")
    pod["spec"].setdefault("schedulingGates", []).append({"name": GATE})
    return True


def workload(pod: dict[str, Any], version: str) -> dict[str, Any]:
    """The Workload Kueue makes for a pod it manages."""
    meta = pod["metadata"]
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "Workload",
        "metadata": {
            "name": f"pod-{meta['name']}"[:253],
            "namespace": meta["namespace"],
            "labels": {JOB_UID: meta["uid"]},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"]}],
        },
        "spec": {
            "queueName": meta["labels"][QUEUE_LABEL],
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod["spec"]}}],
        },
        "status": {"conditions": []},
    }


def admit(
    workloads: list[dict[str, Any]],
    pods: dict[str, dict[str, Any]],
    local_queues: dict[tuple[str, str], str],
    cluster_queues: dict[str, dict[str, Any]],
    on_admitted: Callable[[dict[str, Any]], None],
) -> None:
    """Admit pending Workloads in the order they came while their quota holds: an admitted
    one's pod loses its gate (``on_admitted``); the others say why they wait."""
    used: dict[str, dict[str, Decimal]] = {}
    for found in workloads:
        pod = pods.get(found["metadata"]["labels"][JOB_UID])
        if pod is None or (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        if _condition(found, "Admitted"):
            queue = _cluster_queue(found, local_queues)
            for name, value in pod_requests(pod["spec"]).items():
                used.setdefault(queue, {})[name] = used.get(queue, {}).get(name, 0) + value
    for found in workloads:
        pod = pods.get(found["metadata"]["labels"][JOB_UID])
        if pod is None or _condition(found, "Admitted"):
            continue
        queue = _cluster_queue(found, local_queues)
        if queue not in cluster_queues:
            why = f"LocalQueue {found['spec']['queueName']} doesn't exist"
            _set(found, "QuotaReserved", "False", "Inadmissible", why)
            continue
        requests = pod_requests(pod["spec"])
        why = _short(cluster_queues[queue], requests, used.get(queue, {}))
        if why:
            _set(found, "QuotaReserved", "False", "Pending", why)
            continue
        for name, value in requests.items():
            used.setdefault(queue, {})[name] = used.get(queue, {}).get(name, 0) + value
        _set(
            found,
            "QuotaReserved",
            "True",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {queue}",
        )
        _set(found, "Admitted", "True", "Admitted", "The workload is admitted")
        pod["spec"]["schedulingGates"] = [
            g for g in pod["spec"].get("schedulingGates") or [] if g["name"] != GATE
        ]
        on_admitted(pod)


def quota(cluster_queue: dict[str, Any]) -> dict[str, Decimal]:
    """The most a ClusterQueue lends one workload, by resource: its largest flavor's quota."""
    found: dict[str, Decimal] = {}
    for group in cluster_queue["spec"].get("resourceGroups") or []:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                amount = _quantity(resource["nominalQuota"])
                found[resource["name"]] = max(found.get(resource["name"], Decimal(0)), amount)
    return found


def _short(
    cluster_queue: dict[str, Any], requests: dict[str, Decimal], used: dict[str, Decimal]
) -> str:
    """Why a ClusterQueue cannot admit requests now, in Kueue's words ("" when it can)."""
    limits = quota(cluster_queue)
    flavor = cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["name"]
    for name, amount in sorted(requests.items()):
        if name not in limits:
            return (
                f"couldn't assign flavors to pod set main: resource {name} unavailable in "
                "ClusterQueue"
            )
        more = used.get(name, Decimal(0)) + amount - limits[name]
        if more > 0:
            return (
                f"couldn't assign flavors to pod set main: insufficient unused quota for "
                f"{name} in flavor {flavor}, {_format(name, more)} more needed"
            )
    return ""


def _cluster_queue(found: dict[str, Any], local_queues: dict[tuple[str, str], str]) -> str:
    return local_queues.get((found["metadata"]["namespace"], found["spec"]["queueName"]), "")


def _condition(found: dict[str, Any], kind: str) -> bool:
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _set(found: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
    conditions = [c for c in found["status"]["conditions"] if c["type"] != kind]
    conditions.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    found["status"]["conditions"] = conditions


def _format(name: str, amount: Decimal) -> str:
    if name == "cpu":
        return f"{amount.normalize():f}"
    return f"{int(amount / 2**30)}Gi" if amount % 2**30 == 0 else f"{int(amount / 2**20)}Mi"


def _quantity(value: Any) -> Decimal:
    parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    return parsed
