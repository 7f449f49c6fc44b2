"""The nodes of the cluster as simrun sees them, and the reservation of a node for a run.

A reservation is a taint and a label on the node, written read-modify-write guarded by the
node's ``resourceVersion`` (a node written meanwhile is read again). Which nodes the runs may
use and reserve is the pure ``nodes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from runs.backends.argo.clients import Clients
from runs.backends.argo.manifest import RESERVATION_EFFECT, RESERVED_KEY
from runs.backends.argo.nodes import RESERVABLE, allocatable, reservable
from runs.backends.base import NodeInfo, TaskPlan
from runs.backends.nodes import choose_node

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 10
"""Read-modify-write attempts on a node whose resourceVersion keeps changing."""


class NodeReservations:
    """The nodes the runs' pods may use, who holds each, and their reservation."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients

    def choose_node(self, plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()) -> str:
        return choose_node(self.nodes(), plans, taken=taken, reservable=RESERVABLE)

    def nodes(self) -> list[NodeInfo]:
        """The nodes the runs' pods may use (those of the node selector), with their holder and
        whether a run may reserve them (``nodes``)."""
        found = []
        for node in listed_nodes(self.clients):
            # What the API server returns has metadata and a name.
            assert node.metadata is not None and node.metadata.name is not None
            labels = node.metadata.labels or {}
            taints = (node.spec.taints if node.spec else None) or []
            cores, memory_gb = allocatable(node)
            conditions = (node.status.conditions if node.status else None) or []
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
            found.append(
                NodeInfo(
                    name=node.metadata.name,
                    cores=cores,
                    memory_gb=memory_gb,
                    ready=ready and not (node.spec and node.spec.unschedulable),
                    reserved_by=_holder(node),
                    labels=labels,
                    reservable=reservable(
                        labels, taints, node_selector=self.clients.cluster.node_selector
                    ),
                )
            )
        return found

    def reserve(self, node: str, run_id: str) -> None:
        """Taint ``simrun/reserved=<run>:NoSchedule`` and label the node; other taints are kept.

        ``NoSchedule``, not ``NoExecute``: the pods already there (a DaemonSet's CSI node plugin,
        a monitoring agent) stay, only other new pods are kept off.

        KeyError for an unknown node; ValueError when another run holds it.
        """

        def reserved(current: Any) -> dict[str, Any] | None:
            holder = _holder(current)
            if holder not in (None, run_id):
                raise ValueError(f"node {node} is reserved by run {holder}")
            taints = self._taints(current)
            mine = {"key": RESERVED_KEY, "value": run_id, "effect": RESERVATION_EFFECT}
            labelled = (current.metadata.labels or {}).get(RESERVED_KEY) == run_id
            if labelled and mine in taints:
                return None
            kept = [t for t in taints if t.get("key") != RESERVED_KEY]
            return _node_patch(current, labels={RESERVED_KEY: run_id}, taints=[*kept, mine])

        self._update_node(node, reserved)

    def unreserve(self, node: str, run_id: str) -> None:
        """Remove this run's taint and label; another run's reservation is left as it is.

        KeyError for an unknown node.
        """

        def released(current: Any) -> dict[str, Any] | None:
            taints = self._taints(current)
            kept = [t for t in taints if not _is_reservation(t, run_id)]
            labelled = (current.metadata.labels or {}).get(RESERVED_KEY) == run_id
            if len(kept) == len(taints) and not labelled:
                return None
            labels = {RESERVED_KEY: None} if labelled else {}
            return _node_patch(current, labels=labels, taints=kept)

        self._update_node(node, released)

    def _taints(self, node: Any) -> list[dict[str, Any]]:
        taints = (node.spec.taints if node.spec else None) or []
        return [self.clients.core.api_client.sanitize_for_serialization(t) for t in taints]

    def _update_node(self, node: str, change: Callable[[Any], dict[str, Any] | None]) -> None:
        """Read, change and patch a node guarded by its resourceVersion; retry on 409."""
        for _ in range(CONFLICT_RETRIES):
            try:
                current = self.clients.core.read_node(node)
                body = change(current)
                if body is None:
                    return
                self.clients.core.patch_node(node, body)
                return
            except ApiException as error:
                if error.status == 404:
                    raise KeyError(node) from None
                if error.status != 409:
                    raise
                log.info("node %s changed meanwhile; reading it again", node)
        raise RuntimeError(f"node {node} kept changing: {CONFLICT_RETRIES} conflicting writes")


def listed_nodes(clients: Clients, core: CoreV1Api | None = None) -> list[Any]:
    """The nodes of the node selector (all without one), with ``core`` or the clients' own."""
    selector = ",".join(f"{k}={v}" for k, v in sorted(clients.cluster.node_selector.items()))
    return list((core or clients.core).list_node(label_selector=selector or None).items)


def _holder(node: Any) -> str | None:
    """The run a node is reserved for: its label, else its taint."""
    label = (node.metadata.labels or {}).get(RESERVED_KEY)
    if label:
        return str(label)
    for taint in (node.spec.taints if node.spec else None) or []:
        if taint.key == RESERVED_KEY and taint.value:
            return str(taint.value)
    return None


def _is_reservation(taint: dict[str, Any], run_id: str) -> bool:
    return taint.get("key") == RESERVED_KEY and taint.get("value") == run_id


def _node_patch(
    node: Any, *, labels: Mapping[str, str | None], taints: list[dict[str, Any]]
) -> dict[str, Any]:
    """A strategic merge patch of a node's labels and (atomic) taints, guarded by its
        resourceVersion: a node written meanwhile makes it fail with 409 (Kubernetes' optimistic
    concurrency)."""
    metadata: dict[str, Any] = {"resourceVersion": node.metadata.resource_version}
    if labels:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata, "spec": {"taints": taints}}
