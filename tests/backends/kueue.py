"""Kueue's pod integration, for the strict stand-in (``kube_api``): its webhook and its quota.

A pod created with the label ``kueue.x-k8s.io/queue-name`` in a namespace Kueue manages
(``managed-by-kueue: "true"``, docs/cluster.md) gets the scheduling gate
``kueue.x-k8s.io/admission``, the label ``kueue.x-k8s.io/managed`` and Kueue's finalizer,
and one Workload of its own (labelled with the pod's uid). Workloads are admitted in the order
they came while their ClusterQueue's quota holds their requests, as Kueue's docs define it
("Cluster Queue", "Cohort"): one flavor per resource group; in a cohort, borrowing what the
cohort's tree leaves unused up to the ``borrowingLimit`` (none: no limit). The tree is the
ClusterQueues of its Cohorts (a Cohort object's ``parentName`` joins a tree, its
``nominalQuota`` is shared by the tree beyond the ClusterQueues' own); each ClusterQueue lends
at most its ``lendingLimit`` (keeping ``nominalQuota - lendingLimit`` for itself), all of its
quota without one; a Cohort's limits act likewise between it and its parent (``Quotas``, as
Kueue's resource nodes compute what a node may take). An admitted pod loses its gate (and
goes on to the kubelet); one that does not fit stays gated, its Workload saying why in Kueue's
words (a resource the ClusterQueue does not cover, quota short in each flavor). What Kueue's
webhook refuses of a ClusterQueue is ``webhook_causes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from tests.backends.kube_rules import Cause

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


Used = dict[tuple[str, str, str], Decimal]
"""What each ClusterQueue uses of each flavor's resource: (queue, flavor, resource)."""


@dataclass(frozen=True)
class Quotas:
    """Kueue's ClusterQueues and Cohorts by name."""

    cluster_queues: dict[str, dict[str, Any]]
    cohorts: dict[str, dict[str, Any]]

    def available(self, node: str, key: tuple[str, str], used: Used) -> Decimal:
        """What a node ("cq/<name>" or "cohort/<name>") may still take of a flavor's resource,
        as Kueue's resource nodes say: its guaranteed quota unused, and what its parent has
        (at most what it put there and its ``borrowingLimit``); a root, its subtree unused."""
        parent = self._parent(node)
        subtree, usage = self._subtree(node, key, used), self._usage(node, key, used)
        if not parent:
            return subtree - usage
        guaranteed = self._guaranteed(node, key, used)
        from_parent = self.available(parent, key, used)
        if (limit := self._limits(node, key)[0]) is not None:
            stored, in_parent = subtree - guaranteed, max(Decimal(0), usage - guaranteed)
            from_parent = min(from_parent, stored - in_parent + limit)
        return max(Decimal(0), guaranteed - usage) + from_parent

    def _parent(self, node: str) -> str:
        kind, name = node.split("/", 1)
        obj = self.cluster_queues[name] if kind == "cq" else self.cohorts.get(name) or {}
        found = _cohort(obj) if kind == "cq" else (obj.get("spec") or {}).get("parentName")
        return f"cohort/{found}" if found else ""

    def _children(self, node: str) -> list[str]:
        if node.startswith("cq/"):
            return []
        queues = [f"cq/{n}" for n in self.cluster_queues if self._parent(f"cq/{n}") == node]
        return queues + [f"cohort/{n}" for n in self.cohorts if self._parent(f"cohort/{n}") == node]

    def _limits(self, node: str, key: tuple[str, str]) -> tuple[Decimal | None, Decimal | None]:
        """A node's ``borrowingLimit`` and ``lendingLimit`` of a flavor's resource."""
        kind, name = node.split("/", 1)
        obj = self.cluster_queues[name] if kind == "cq" else self.cohorts.get(name) or {}
        found = _quota(obj.get("spec") or {}, *key)
        if found is None:  # a ClusterQueue borrows only what it lists, a Cohort without limit
            return (Decimal(0) if kind == "cq" else None), None
        return found[1], found[2]

    def _subtree(self, node: str, key: tuple[str, str], used: Used) -> Decimal:
        kind, name = node.split("/", 1)
        obj = self.cluster_queues[name] if kind == "cq" else self.cohorts.get(name) or {}
        own = (_quota(obj.get("spec") or {}, *key) or (Decimal(0),))[0]
        return own + sum(
            (
                self._subtree(c, key, used) - self._guaranteed(c, key, used)
                for c in self._children(node)
            ),
            Decimal(0),
        )

    def _guaranteed(self, node: str, key: tuple[str, str], used: Used) -> Decimal:
        lending = self._limits(node, key)[1]
        subtree = self._subtree(node, key, used)
        return Decimal(0) if lending is None else max(Decimal(0), subtree - lending)

    def _usage(self, node: str, key: tuple[str, str], used: Used) -> Decimal:
        if node.startswith("cq/"):
            return used.get((node[3:], *key), Decimal(0))
        return sum(
            (
                max(Decimal(0), self._usage(c, key, used) - self._guaranteed(c, key, used))
                for c in self._children(node)
            ),
            Decimal(0),
        )


def webhook_causes(obj: dict[str, Any]) -> list[Cause]:
    """What Kueue's webhook refuses of a ClusterQueue: a ``borrowingLimit`` or ``lendingLimit``
    outside a cohort, a ``lendingLimit`` above the ``nominalQuota``; of a Cohort, the limits
    without a parent."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "ClusterQueue":
        joined = bool(_cohort(obj))
    elif obj.get("kind") == "Cohort":
        joined = bool(spec.get("parentName"))
    else:
        return []
    causes = []
    for g, group in enumerate(spec.get("resourceGroups") or []):
        for f, flavor in enumerate(group.get("flavors") or []):
            for r, resource in enumerate(flavor.get("resources") or []):
                at = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                for limit in ("borrowingLimit", "lendingLimit"):
                    if limit in resource and not joined:
                        causes.append(Cause(f"{at}.{limit}", "must be nil when cohort is empty"))
                lending = resource.get("lendingLimit")
                if lending is not None and _quantity(lending) > _quantity(resource["nominalQuota"]):
                    causes.append(
                        Cause(
                            f"{at}.lendingLimit", "must be less than or equal to the nominalQuota"
                        )
                    )
    return causes


def admit(
    workloads: list[dict[str, Any]],
    pods: dict[str, dict[str, Any]],
    local_queues: dict[tuple[str, str], str],
    quotas: Quotas,
    on_admitted: Callable[[dict[str, Any]], None],
) -> None:
    """Admit pending Workloads in the order they came while their quota holds, as Kueue does:
    one flavor per resource group (the first, in order, that holds all the group's requests),
    borrowing in a cohort what its tree leaves unused (``_room``). An admitted one's pod loses
    its gate (``on_admitted``) and the Workload records its flavors; the others say why they
    wait."""
    used: dict[tuple[str, str, str], Decimal] = {}
    for found in workloads:
        pod = pods.get(found["metadata"]["labels"][JOB_UID])
        if pod is None or (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        if _condition(found, "Admitted"):
            queue = _cluster_queue(found, local_queues)
            assigned = found["status"]["admission"]["podSetAssignments"][0]["flavors"]
            for name, value in pod_requests(pod["spec"]).items():
                if name in assigned:
                    key = (queue, assigned[name], name)
                    used[key] = used.get(key, Decimal(0)) + value
    for found in workloads:
        pod = pods.get(found["metadata"]["labels"][JOB_UID])
        if pod is None or _condition(found, "Admitted"):
            continue
        queue = _cluster_queue(found, local_queues)
        if queue not in quotas.cluster_queues:
            why = f"LocalQueue {found['spec']['queueName']} doesn't exist"
            _set(found, "QuotaReserved", "False", "Inadmissible", why)
            continue
        requests = pod_requests(pod["spec"])
        assigned, why = _flavors(queue, quotas, requests, used)
        if why:
            _set(found, "QuotaReserved", "False", "Pending", why)
            continue
        for name, value in requests.items():
            if name in assigned:
                key = (queue, assigned[name], name)
                used[key] = used.get(key, Decimal(0)) + value
        found["status"]["admission"] = {
            "clusterQueue": queue,
            "podSetAssignments": [{"name": "main", "flavors": assigned, "count": 1}],
        }
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


def _flavors(
    queue: str,
    quotas: Quotas,
    requests: dict[str, Decimal],
    used: dict[tuple[str, str, str], Decimal],
) -> tuple[dict[str, str], str]:
    """The flavor of each requested resource, or why none can be assigned now in Kueue's
    words: a resource the ClusterQueue does not cover, a flavor short of quota."""
    spec = quotas.cluster_queues[queue]["spec"]
    asked = {name: amount for name, amount in requests.items() if amount > 0}
    groups = spec.get("resourceGroups") or []
    assigned: dict[str, str] = {}
    for name in sorted(asked):
        if not any(name in g.get("coveredResources", []) for g in groups):
            return {}, (
                f"couldn't assign flavors to pod set main: resource {name} unavailable in "
                "ClusterQueue"
            )
    for group in groups:
        mine = {n: a for n, a in asked.items() if n in group.get("coveredResources", [])}
        if not mine:
            continue
        short = []
        for flavor in group["flavors"]:
            lacking = [
                (name, used.get((queue, flavor["name"], name), Decimal(0)) + amount - room)
                for name, amount in sorted(mine.items())
                if (room := _room(queue, flavor["name"], name, quotas, used)) is not None
                and used.get((queue, flavor["name"], name), Decimal(0)) + amount > room
            ]
            if not lacking:
                assigned.update(dict.fromkeys(mine, flavor["name"]))
                break
            name, more = lacking[0]
            short.append(
                f"insufficient unused quota for {name} in flavor {flavor['name']}, "
                f"{_format(name, more)} more needed"
            )
        else:
            return {}, "couldn't assign flavors to pod set main: " + "; ".join(short)
    return assigned, ""


def _room(
    queue: str,
    flavor: str,
    name: str,
    quotas: Quotas,
    used: Used,
) -> Decimal | None:
    """The most a ClusterQueue may use of a resource in a flavor now: what it uses and what it
    may still take (``Quotas.available``); outside a cohort, its nominal quota."""
    if not _cohort(quotas.cluster_queues[queue]):
        return (_quota(quotas.cluster_queues[queue]["spec"], flavor, name) or (Decimal(0),))[0]
    mine = used.get((queue, flavor, name), Decimal(0))
    return mine + quotas.available(f"cq/{queue}", (flavor, name), used)


def _cohort(cluster_queue: dict[str, Any]) -> str:
    """The cohort of a ClusterQueue (``cohortName``, ``cohort`` in v1beta1); "" outside one."""
    spec = cluster_queue.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def _quota(
    spec: dict[str, Any], flavor: str, name: str
) -> tuple[Decimal, Decimal | None, Decimal | None] | None:
    """A ClusterQueue's (or a Cohort's) ``nominalQuota``, ``borrowingLimit`` and
    ``lendingLimit`` (None: not set) of a resource in a flavor; None when it lists none."""
    for group in spec.get("resourceGroups") or []:
        for found in group["flavors"]:
            if found["name"] != flavor:
                continue
            for resource in found["resources"]:
                if resource["name"] == name:
                    limit, lending = resource.get("borrowingLimit"), resource.get("lendingLimit")
                    return (
                        _quantity(resource["nominalQuota"]),
                        None if limit is None else _quantity(limit),
                        None if lending is None else _quantity(lending),
                    )
    return None


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
