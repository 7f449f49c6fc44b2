"""Which nodes of the cluster the runs' pods may use and which a run may reserve.

A run's pods go to the nodes of the configured node selector and tolerate only their own
run's reservation, so a node with any other ``NoSchedule`` or ``NoExecute`` taint (a control
plane's, a GPU pool's, a node under maintenance) is no place for them. A reservation evicts
every pod without the toleration, so only nodes an operator marked for simrun (the label
``simrun.io/pool``, or the node selector when one is configured) are reservable, and never a
control-plane node. See docs/cluster.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runs.backends.argo.manifest import RESERVED_KEY
from runs.backends.base import NodeInfo, TaskPlan

POOL_LABEL = "simrun.io/pool"
"""The label an operator puts on the nodes a run may reserve (any value)."""
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


@dataclass(frozen=True)
class Need:
    """What the largest task of a run asks of one node."""

    cores: int
    memory_gb: float
    retry_memory_gb: float

    @classmethod
    def of(cls, plans: Mapping[str, TaskPlan]) -> Need:
        return cls(
            cores=max((p.cores for p in plans.values()), default=1),
            memory_gb=max((p.memory_gb for p in plans.values()), default=0.0),
            retry_memory_gb=max((p.retry_memory_gb for p in plans.values()), default=0.0),
        )


def choose_node(
    nodes: Iterable[NodeInfo], plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()
) -> str:
    """The smallest free reservable node that fits the run's largest task, with its retry
    memory if one can; LookupError saying why when there is none. ``taken``: nodes another
    run got first."""
    need = Need.of(plans)
    skipped = set(taken)
    free = [
        n
        for n in nodes
        if n.ready and n.reservable and n.reserved_by is None and n.name not in skipped
    ]
    if not free:
        raise LookupError(
            "no node is free to reserve for the run: reservable nodes are those labelled "
            f"{POOL_LABEL} (or of the node selector), ready and held by no run"
        )
    fits = [n for n in free if n.cores >= need.cores and n.memory_gb >= need.memory_gb]
    if not fits:
        raise LookupError(
            f"no free node fits the run's largest task ({need.cores} cores, "
            f"{need.memory_gb:g} GiB): the free nodes have at most "
            f"{max(n.cores for n in free):g} cores and {max(n.memory_gb for n in free):.1f} GiB"
        )
    roomy = [n for n in fits if n.memory_gb >= need.retry_memory_gb] or fits
    return min(roomy, key=lambda n: (n.cores, n.memory_gb, n.name)).name
