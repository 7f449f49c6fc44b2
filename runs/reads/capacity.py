"""The machines as a user sees them: nodes, their reservations, the pods placed on them.

Read from the backend's cheap read calls (``nodes``, ``placements``) and matched to the runs
of the record in one query. A user sees the pods and reservations of their own runs; the
usage of a node counts every pod, whose run it is or not, so the bars tell the truth.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from runs.backends import get_backend
from runs.backends.base import NodeInfo, Placement
from runs.models import Run

logger = logging.getLogger(__name__)

UNSCHEDULED = ""
"""The node name under which pods without a node yet are grouped."""


class BackendUnavailable(Exception):
    """The backend did not answer a read call."""


@dataclass
class PlacedPod:
    """A placement with the run it belongs to, when the user may see that run."""

    placement: Placement
    run_id: str | None


@dataclass
class NodeUse:
    """A node with the pods on it and what they take of it."""

    node: NodeInfo | None
    name: str
    pods: list[PlacedPod] = field(default_factory=list)
    cores_used: float = 0.0
    memory_gb_used: float = 0.0
    hidden_pods: int = 0
    reserved: bool = False
    reserved_run: str | None = None

    @property
    def pod_count(self) -> int:
        return len(self.pods) + self.hidden_pods

    @property
    def cores_percent(self) -> float:
        return _percent(self.cores_used, self.node.cores if self.node else 0)

    @property
    def memory_percent(self) -> float:
        return _percent(self.memory_gb_used, self.node.memory_gb if self.node else 0)


def _percent(used: float, total: float) -> float:
    return 0.0 if total <= 0 else min(100.0, 100.0 * used / total)


def read_nodes_and_placements() -> tuple[list[NodeInfo], list[Placement]]:
    """Ask the backend; ``BackendUnavailable`` when it fails, never a crash of the request."""
    backend = get_backend()
    try:
        return list(backend.nodes()), list(backend.placements())
    except Exception as error:  # any failure of a cluster client: report, do not crash
        logger.warning("the backend did not answer nodes/placements: %s", error)
        raise BackendUnavailable(str(error)) from error


def cluster_for(user: Any) -> list[NodeUse]:
    """Every node with its pods and reservation, as ``user`` may see them."""
    nodes, placements = read_nodes_and_placements()
    owners = _runs_by_workflow_and_id(
        {p.workflow for p in placements}, {n.reserved_by for n in nodes if n.reserved_by}
    )

    def visible(run: tuple[str, int] | None) -> str | None:
        if run is None or not (user.is_staff or run[1] == user.pk):
            return None
        return run[0]

    uses = {n.name: NodeUse(node=n, name=n.name) for n in nodes}
    for node in nodes:
        use = uses[node.name]
        use.reserved = bool(node.reserved_by)
        if node.reserved_by:
            use.reserved_run = visible(owners["id"].get(node.reserved_by))
            if use.reserved_run is None and user.is_staff:
                use.reserved_run = node.reserved_by
    for placement in placements:
        name = placement.node or UNSCHEDULED
        use = uses.setdefault(name, NodeUse(node=None, name=name))
        if placement.node:
            use.cores_used += placement.cores
            use.memory_gb_used += placement.memory_gb
        run_id = visible(owners["workflow"].get(placement.workflow))
        if run_id is None and not user.is_staff:
            use.hidden_pods += 1
        else:
            use.pods.append(PlacedPod(placement, run_id))
    return sorted(uses.values(), key=lambda u: (u.node is None, u.name))


def _runs_by_workflow_and_id(
    workflows: set[str], run_ids: set[str]
) -> dict[str, dict[str, tuple[str, int]]]:
    """Runs named by workflow or id, as (run id, owner id): one query."""
    found: dict[str, dict[str, tuple[str, int]]] = {"workflow": {}, "id": {}}
    if not workflows and not run_ids:
        return found
    rows = Run.objects.filter(Q(workflow__in=workflows) | Q(pk__in=run_ids)).values_list(
        "id", "workflow", "owner_id"
    )
    for run_id, workflow, owner_id in rows:
        found["id"][run_id] = (run_id, owner_id)
        if workflow:
            found["workflow"][workflow] = (run_id, owner_id)
    return found
