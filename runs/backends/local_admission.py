"""Which waiting processes of the local backend start now, and why the others wait.

The queue is every node ready to start, of every live run, in the order of submission. The
first that fits the free cores and memory starts; the first that does not is the head of the
queue. A later node starts beside it (backfill) only if it cannot delay the head: however
long it runs, the head still fits at the first moment the running processes would have left
it room. A node larger than the machine can never start: it is refused with a clear message
instead of holding the queue. Pure functions, so the rules are tested without processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SUMS_LIMIT = 4096
"""The most combinations of running processes weighed for a backfill; more and none starts."""


@dataclass(frozen=True)
class Demand:
    """A node ready to start: its run, its name, the cores and memory its attempt needs."""

    run: str
    node: str
    cores: int
    memory_gb: float


@dataclass(frozen=True)
class Held:
    """What a running process holds, and of which run."""

    run: str
    cores: int
    memory_gb: float


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
    if len(names) == 1:
        return f"run {names[0]} holds"
    return f"runs {', '.join(names[:-1])} and {names[-1]} hold"


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


def admit(queue: list[Demand], held: list[Held], cores: int, memory_gb: float) -> Admission:
    """What starts of a queue (in its order) beside the running processes of ``held``."""
    found = Admission()
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
            held.append(Held(demand.run, demand.cores, demand.memory_gb))
            free_cores -= demand.cores
            free_gb -= demand.memory_gb
        elif not fits:
            found.waiting[demand] = shortage(demand, held, cores, memory_gb)
            head = head or demand
        else:
            assert head is not None
            found.waiting[demand] = (
                f"waits behind {head.node} of run {head.run}, first in the queue, "
                "which starting now could delay"
            )
    return found
