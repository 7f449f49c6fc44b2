"""Which node a run that asked for a reservation gets, on any backend that has nodes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runs.backends.base import NodeInfo, TaskPlan


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
    nodes: Iterable[NodeInfo],
    plans: Mapping[str, TaskPlan],
    *,
    taken: Iterable[str] = (),
    reservable: str = "those an operator marked for simrun",
) -> str:
    """The smallest free reservable node that fits the run's largest task, with its retry
    memory if one can; LookupError saying why when there is none. ``taken``: nodes another
    run got first; ``reservable``: which nodes are, in the backend's words."""
    need = Need.of(plans)
    skipped = set(taken)
    free = [
        n
        for n in nodes
        if n.ready and n.reservable and n.reserved_by is None and n.name not in skipped
    ]
    if not free:
        raise LookupError(
            f"no node is free to reserve for the run: reservable nodes are {reservable}, "
            "ready and held by no run"
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
