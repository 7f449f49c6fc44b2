"""What a ClusterQueue's cohort could ever give it, read as Kueue reads a tree of cohorts.

Kueue's docs ("Cohort"; its ``resource_node``): ClusterQueues join a cohort (``cohortName``),
Cohort objects join a parent (``parentName``), and the tree's quota is shared. Each node, a
ClusterQueue or a Cohort, has a subtree quota: its own ``nominalQuota`` and what its children
put in it. A node with a ``lendingLimit`` keeps ``subtree - lendingLimit`` for itself (its
guaranteed quota) and puts the rest in its parent; one without puts all of it. What a node may
take is its guaranteed quota and what its parent has, the latter at most what it put there and
its ``borrowingLimit``; the root has its subtree. Here nothing is used yet: it is the most the
tree could ever give, the cap of a pod that would wait in Kueue forever above it. A cohort no
Cohort object names is a root without quota of its own, as Kueue takes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

Key = tuple[str, str]
"""A flavor and a resource."""


def cohort_of(cluster_queue: Mapping[str, Any]) -> str:
    """The cohort of a ClusterQueue (``cohortName``, ``cohort`` in v1beta1); "" outside one."""
    spec = cluster_queue.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def quotas(obj: Mapping[str, Any]) -> dict[Key, dict[str, Decimal]]:
    """A ClusterQueue's or a Cohort's ``nominalQuota``, ``borrowingLimit`` and ``lendingLimit``
    (those it sets) by flavor and resource."""
    found: dict[Key, dict[str, Decimal]] = {}
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                found[(flavor["name"], resource["name"])] = {
                    field: _quantity(resource[field])
                    for field in ("nominalQuota", "borrowingLimit", "lendingLimit")
                    if field in resource
                }
    return found


class Tree:
    """The ClusterQueues and Cohorts of a cluster, as the nodes of their cohort trees."""

    def __init__(
        self, cluster_queues: list[Mapping[str, Any]], cohorts: list[Mapping[str, Any]]
    ) -> None:
        # The kind of each node said (the items of a list need not say it).
        self.cohorts = {c["metadata"]["name"]: {**c, "kind": "Cohort"} for c in cohorts}
        self.members: dict[str, list[Mapping[str, Any]]] = {}
        for queue in cluster_queues:
            if cohort_of(queue):
                member = {**queue, "kind": "ClusterQueue"}
                self.members.setdefault(cohort_of(queue), []).append(member)
        for name, cohort in self.cohorts.items():
            if parent := self._parent(name):
                self.members.setdefault(parent, []).append(cohort)

    def from_cohort(self, cohort: str, key: Key) -> Decimal:
        """The most a cohort may give its members of a flavor's resource, nothing used."""
        return self._available(cohort, key, frozenset({cohort}))

    def _put_in_parent(self, node: Mapping[str, Any], key: Key, seen: frozenset[str]) -> Decimal:
        """What a node puts in its parent: its subtree, at most its ``lendingLimit``."""
        subtree = self._subtree(node, key, seen)
        lending = quotas(node).get(key, {}).get("lendingLimit")
        return subtree if lending is None else min(subtree, lending)

    def _subtree(self, node: Mapping[str, Any], key: Key, seen: frozenset[str]) -> Decimal:
        own = quotas(node).get(key, {}).get("nominalQuota", Decimal(0))
        if node.get("kind") != "Cohort":
            return own
        name = node["metadata"]["name"]
        if name in seen:  # a cycle: Kueue disables its members
            return Decimal(0)
        children = self.members.get(name, [])
        return own + sum(
            (self._put_in_parent(child, key, seen | {name}) for child in children), Decimal(0)
        )

    def _available(self, cohort: str, key: Key, below: frozenset[str]) -> Decimal:
        """What a cohort may give, nothing used; ``below``: the cohorts asked it (a cycle of
        parents ends there)."""
        node = self.cohorts.get(cohort) or {"kind": "Cohort", "metadata": {"name": cohort}}
        subtree = self._subtree(node, key, frozenset())
        parent = self._parent(cohort)
        if not parent or parent in below:
            return subtree
        put = self._put_in_parent(node, key, frozenset())
        from_parent = self._available(parent, key, below | {cohort})
        if (limit := quotas(node).get(key, {}).get("borrowingLimit")) is not None:
            from_parent = min(from_parent, put + limit)
        return subtree - put + from_parent

    def _parent(self, cohort: str) -> str:
        found = self.cohorts.get(cohort) or {}
        return str((found.get("spec") or {}).get("parentName") or "")


def _quantity(value: Any) -> Decimal:
    parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]  # kubernetes.utils is unannotated
    return parsed
