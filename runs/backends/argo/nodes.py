"""Which nodes of the cluster the runs' pods may use and which a run may reserve.

A run's pods go to the nodes of the configured node selector and tolerate only their own
run's reservation, so a node with any other ``NoSchedule`` or ``NoExecute`` taint (a control
plane's, a GPU pool's, a node under maintenance) is no place for them. A reservation keeps
every other new pod off the node (``NoSchedule``: the pods there stay), so only nodes an
operator marked for simrun (the label ``simrun.io/pool``, or the node selector when one is
configured) are reservable, and never a control-plane node; the node policy
(docker/k8s/15-node-policy.yaml) lets the worker reserve no other. See docs/cluster.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from runs.backends.argo.manifest import RESERVED_KEY

POOL_LABEL = "simrun.io/pool"
"""The label an operator puts on the nodes a run may reserve (any value)."""
RESERVABLE = f"those labelled {POOL_LABEL} (or of the node selector)"
"""Which nodes a run may reserve, as a refusal says it."""
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
REPELLING = frozenset({"NoSchedule", "NoExecute"})
TOLERATED = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
"""Taints Kubernetes gives every pod a toleration for (300 s)."""


def is_control_plane(labels: Mapping[str, str]) -> bool:
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def untolerated_taints(taints: Iterable[Any]) -> list[str]:
    """The keys of the taints a run's pods do not tolerate (a reservation's they may)."""
    return [
        str(t.key)
        for t in taints
        if t.effect in REPELLING and t.key != RESERVED_KEY and t.key not in TOLERATED
    ]


def usable(labels: Mapping[str, str], taints: Iterable[Any]) -> bool:
    """Whether a run's pods may run on a node of the selector at all."""
    return not is_control_plane(labels) and not untolerated_taints(taints)


def reservable(
    labels: Mapping[str, str], taints: Iterable[Any], *, node_selector: Mapping[str, str]
) -> bool:
    """Whether a run may reserve a node of the selector: marked for simrun and usable."""
    marked = bool(node_selector) or POOL_LABEL in labels
    return marked and usable(labels, taints)


GIB = 2**30


def quantity(value: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``4Gi``) as a number."""
    number: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]  # kubernetes.utils is unannotated
    return number


def allocatable(node: Any) -> tuple[float, float]:
    """The cores and GiB a node (the client's model) offers to pods."""
    offered = (node.status.allocatable if node.status else None) or {}
    cores = float(quantity(offered.get("cpu", "0")))
    return cores, float(quantity(offered.get("memory", "0"))) / GIB
