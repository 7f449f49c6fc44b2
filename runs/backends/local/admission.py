"""Which waiting processes of the local backend start now, and why the others wait.

The queue is every node ready to start, of every live run, in a fair order over their owners
(``fair_order``): each user's nodes in the order of their submission, the users in turn by
the share of the machine each holds, the least first, so one user's many runs cannot keep
another's waiting. The first that fits the free cores and memory starts; the first that does
not is the head of the queue: the next node of the user whose turn it is. A later node starts
beside it (backfill) only if it cannot delay the head: however long it runs, the head still
fits at the first moment the running processes would have left it room. A node larger than
the machine can never start: it is refused with a clear message instead of holding the queue.
Pure functions, so the rules are tested without processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runs.backends.waiting import behind, holders

SUMS_LIMIT = 4096
"""The most combinations of running processes weighed for a backfill; more and none starts."""


@dataclass(frozen=True)
class Demand:
    """A node ready to start: its run, its name, the cores and memory its attempt needs, and
    the owner of its run."""

    run: str
    node: str
    cores: int
    memory_gb: float
    owner: int | None = None


@dataclass(frozen=True)
class Held:
    """What a running process holds, of which run and whose."""

    run: str
    cores: int
    memory_gb: float
    owner: int | None = None


def share(cores: float, memory_gb: float, machine_cores: int, machine_gb: float) -> float:
    """The share of the machine some cores and memory are: the larger of the two fractions
    (a user who holds all the memory holds the machine, however few cores)."""
    return max(cores / machine_cores, memory_gb / machine_gb if machine_gb > 0 else 0.0)


def fair_order(
    queue: list[Demand],
    held: list[Held],
    cores: int,
    memory_gb: float,
    last_start: Mapping[int | None, float] | None = None,
) -> list[Demand]:
    """The queue (in the order of submission) in turns over its owners: next is always the
    next node of the user holding the least share of the machine (what runs, plus what this
    order put before); between equals, the user who started a process least lately
    (``last_start``: so the one whose run just ended waits their turn), then the earlier node."""
    started = last_start or {}
    held_share: dict[int | None, float] = {}
    for process in held:
        part = share(process.cores, process.memory_gb, cores, memory_gb)
        held_share[process.owner] = held_share.get(process.owner, 0.0) + part
    mine: dict[int | None, list[tuple[int, Demand]]] = {}
    for position, demand in enumerate(queue):
        mine.setdefault(demand.owner, []).append((position, demand))
    order = []
    while mine:
        owner = min(
            mine,
            key=lambda o: (round(held_share.get(o, 0.0), 9), started.get(o, -1.0), mine[o][0][0]),
        )
        _, demand = mine[owner].pop(0)
        if not mine[owner]:
            del mine[owner]
        order.append(demand)
        part = share(demand.cores, demand.memory_gb, cores, memory_gb)
        held_share[owner] = held_share.get(owner, 0.0) + part
    return order


@dataclass
class Admission:
    """The nodes to start now, those refused for good (with why), those waiting (with why)."""

    start: list[Demand] = field(default_factory=list)
    refused: dict[Demand, str] = field(default_factory=dict)
    waiting: dict[Demand, str] = field(default_factory=dict)


def too_large(demand: Demand, cores: int, memory_gb: float) -> str | None:
    """Why a node can never start on this machine, None when it fits an idle one."""
    wants = []
    if demand.cores > cores:
        wants.append(f"{demand.cores} cores but this machine has {cores}")
    if demand.memory_gb > memory_gb:
        wants.append(f"{demand.memory_gb:g} GiB of memory but this machine has {memory_gb:.1f}")
    if not wants:
        return None
    return f"it needs {' and '.join(wants)}, so it can never start here: lower its plan"


def _runs(held: Iterable[Held], holds: str) -> str:
    names = sorted({h.run for h in held if getattr(h, holds) > 0})
    return holders(names, others=False)


def shortage(demand: Demand, held: list[Held], cores: int, memory_gb: float) -> str:
    """Why a node that fits the machine cannot start now: what it waits for, who holds it."""
    free_cores = cores - sum(h.cores for h in held)
    free_gb = memory_gb - sum(h.memory_gb for h in held)
    parts = []
    if demand.cores > free_cores:
        holders = _runs(held, "cores")
        wanted = f"{demand.cores} core{'s' if demand.cores != 1 else ''}"
        parts.append(f"waits for {wanted}; {holders} {cores - free_cores} of {cores}")
    if demand.memory_gb > free_gb + 1e-9:
        parts.append(
            f"waits for {demand.memory_gb:g} GiB of memory; {_runs(held, 'memory_gb')} "
            f"{memory_gb - free_gb:g} of {memory_gb:.1f} GiB"
        )
    return "; ".join(parts)


def _fits(demand: Demand, free_cores: int, free_gb: float) -> bool:
    return demand.cores <= free_cores and demand.memory_gb <= free_gb + 1e-9


def delays(head: Demand, other: Demand, held: list[Held], free_cores: int, free_gb: float) -> bool:
    """Whether starting ``other`` now could make ``head`` start later than it would without it.

    The head starts when some of the running processes ended and left it room; ``other``
    must fit into what is left over at every such moment, since it may outlive them all.
    """
    sums = {(0, 0.0)}
    for process in held:
        sums |= {(c + process.cores, round(m + process.memory_gb, 6)) for c, m in sums}
        if len(sums) > SUMS_LIMIT:
            return True
    for ended_cores, ended_gb in sums:
        cores, gb = free_cores + ended_cores, free_gb + ended_gb
        if _fits(head, cores, gb) and not _fits(other, cores - head.cores, gb - head.memory_gb):
            return True
    return False


def admit(
    queue: list[Demand],
    held: list[Held],
    cores: int,
    memory_gb: float,
    last_start: Mapping[int | None, float] | None = None,
) -> Admission:
    """What starts of a queue (in the order of submission) beside the running processes of
    ``held``, taken in its fair order (``fair_order``, with the owners' ``last_start``)."""
    found = Admission()
    queue = fair_order(queue, held, cores, memory_gb, last_start)
    held = list(held)
    free_cores = cores - sum(h.cores for h in held)
    free_gb = memory_gb - sum(h.memory_gb for h in held)
    head: Demand | None = None
    for demand in queue:
        if reason := too_large(demand, cores, memory_gb):
            found.refused[demand] = reason
            continue
        fits = _fits(demand, free_cores, free_gb)
        if fits and (head is None or not delays(head, demand, held, free_cores, free_gb)):
            found.start.append(demand)
            held.append(Held(demand.run, demand.cores, demand.memory_gb, demand.owner))
            free_cores -= demand.cores
            free_gb -= demand.memory_gb
        elif not fits:
            found.waiting[demand] = shortage(demand, held, cores, memory_gb)
            head = head or demand
        else:
            assert head is not None
            found.waiting[demand] = behind(head.node, head.run)
    return found
