"""What a ClusterQueue can admit of one pod, read as Kueue admits (its docs, "Cluster Queue").

A ClusterQueue's ``resourceGroups`` each cover some resources with flavors in order; Kueue
gives a pod one flavor per resource group, all the group's resources from that flavor, so a
pod fits when, in each group that covers what it requests, one flavor holds all of it. A
flavor holds its ``nominalQuota``; a ClusterQueue in a cohort (``cohortName``, ``cohort`` in
v1beta1) may borrow beyond it what its cohort's tree lends (``cohort_tree``, Kueue's "Cohort":
lending and borrowing limits at each level), at most its ``borrowingLimit``. Without the tree
(the Cohort API absent, or its list not allowed), one without a ``borrowingLimit`` borrows
without a limit known: no cap then.

Flavors never add up for one pod: one with many cores and another with much memory give no pod
both, so ``admits`` checks a pod whole, flavor by flavor. The planner's caps (``queue_quota``)
are only what some flavor gives of each resource: a plan above one can never be admitted, and
a plan within both is checked whole by ``admits`` before it is accepted. Caps taken from one
flavor would refuse a task another flavor admits. Many pods at once do add up over the flavors
(Kueue tries the next flavor when one is full): ``pods_at_once`` counts them flavor by flavor.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from runs.backends.argo.cohort_tree import cohort_of

Flavor = dict[str, Decimal | None]
"""The most one pod may get of each resource a flavor lists; None: no limit known."""


FromCohort = Mapping[tuple[str, str], Decimal]
"""The most a ClusterQueue's cohort could ever give it, by flavor and resource
(``cohort_tree``)."""


def queue_flavors(
    cluster_queue: Mapping[str, Any], from_cohort: FromCohort | None = None
) -> list[list[Flavor]]:
    """The flavors of each resource group of a ClusterQueue, in order, each with the most it
    may give one pod by resource (``Flavor``); ``from_cohort``: what its cohort could ever give
    it (None: not known). In a cohort, that is what it keeps for itself (``nominalQuota -
    lendingLimit``) and what it may take of its cohort's, at most what it put there and its
    ``borrowingLimit``."""
    spec = cluster_queue.get("spec") or {}
    pooled = bool(cohort_of(cluster_queue))
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            caps: Flavor = {}
            for resource in flavor.get("resources") or []:
                nominal = _quantity(resource.get("nominalQuota", 0))
                limit = resource.get("borrowingLimit")
                lending = resource.get("lendingLimit")
                put = nominal if lending is None else min(nominal, _quantity(lending))
                taken = [put + _quantity(limit)] if limit is not None else []
                if from_cohort is not None:
                    taken.append(from_cohort.get((flavor["name"], resource["name"]), Decimal(0)))
                if not pooled:
                    caps[resource["name"]] = nominal
                elif taken:
                    caps[resource["name"]] = nominal - put + min(taken)
                else:
                    caps[resource["name"]] = None
            flavors.append(caps)
        groups.append(flavors)
    return groups


def covered(groups: list[list[Flavor]]) -> set[str]:
    """The resources a ClusterQueue covers: Kueue admits no pod that requests another."""
    return {name for flavors in groups for flavor in flavors for name in flavor}


def admits(groups: list[list[Flavor]], requests: Mapping[str, Decimal]) -> bool:
    """Whether the ClusterQueue can ever admit a pod of these requests: each requested resource
    covered, and in each group one flavor that holds all the group's requested resources."""
    asked = {name: amount for name, amount in requests.items() if amount > 0}
    if not set(asked) <= covered(groups):
        return False
    for flavors in groups:
        mine = {n: a for n, a in asked.items() if any(n in flavor for flavor in flavors)}
        if mine and not any(_holds(flavor, mine) for flavor in flavors):
            return False
    return True


def queue_quota(groups: list[list[Flavor]]) -> dict[str, Decimal]:
    """The most one pod may get of each resource in some flavor, for the planner's caps (see
    the module's docstring); a resource some flavor may borrow without limit is left out (no
    cap is known)."""
    found: dict[str, Decimal] = {}
    unbounded = set()
    for flavors in groups:
        for flavor in flavors:
            for name, amount in flavor.items():
                if amount is None:
                    unbounded.add(name)
                else:
                    found[name] = max(found.get(name, Decimal(0)), amount)
    return {name: amount for name, amount in found.items() if name not in unbounded}


def pods_at_once(groups: list[list[Flavor]], requests: Mapping[str, Decimal]) -> int | None:
    """The most pods of these requests the ClusterQueue could hold at once: in each group that
    covers what they request, the sum over its flavors of the pods each holds whole; the least
    over the groups. None when no group limits them (each unlimited somewhere)."""
    asked = {name: amount for name, amount in requests.items() if amount > 0}
    counts = []
    for flavors in groups:
        mine = {n: a for n, a in asked.items() if any(n in flavor for flavor in flavors)}
        held = [_pods_held(flavor, mine) for flavor in flavors] if mine else [None]
        if None not in held:
            counts.append(sum(count for count in held if count is not None))
    return min(counts) if counts else None


def _pods_held(flavor: Flavor, requests: Mapping[str, Decimal]) -> int | None:
    """How many pods of these requests one flavor holds whole; None: without limit."""
    if not all(name in flavor for name in requests):
        return 0
    bounded = [
        int(limit // amount)
        for name, amount in requests.items()
        if (limit := flavor[name]) is not None
    ]
    return min(bounded) if bounded else None


def _holds(flavor: Flavor, requests: Mapping[str, Decimal]) -> bool:
    return all(
        name in flavor and (flavor[name] is None or amount <= (flavor[name] or 0))
        for name, amount in requests.items()
    )


def _quantity(value: Any) -> Decimal:
    parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]  # kubernetes.utils is unannotated
    return parsed
