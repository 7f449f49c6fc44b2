"""The claim-compute loop of a worker: how many batches it keeps in flight, and what they hold."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import pool
from harness.ledger import Ledger
from harness.work_loop import Tally, WorkLoop


class HeldPool:
    """A pool whose batches never end: what the loop submitted, and nothing else."""

    def __init__(self) -> None:
        self.batches: list[list[range]] = []

    def submit(self, function: Callable[..., Any], ranges: list[range]) -> Future[Any]:
        assert function is pool.compute_batch
        self.batches.append(ranges)
        return Future()


def loop_over(ledger: Ledger, executor: HeldPool, processes: int) -> WorkLoop:
    return WorkLoop(
        ledger=ledger,
        executor=executor,  # type: ignore[arg-type]
        flag=SimpleNamespace(value=0),
        slots=[0.0] * processes * pool.SLOT,
        processes=processes,
        stop=threading.Event(),
        grace_s=1.0,
        unit_time_limit_s=None,
        coordinator=True,
        stale_s=60.0,
        poll_s=1.0,
        tally=Tally(),
    )


def test_each_pool_process_has_its_next_batch_queued_once_its_units_are_short(
    tmp_path: Path,
) -> None:
    """A process that ends a batch takes the next from the pool's queue at once, instead of
    waiting for the worker to wake, release and claim."""
    ledger = Ledger.open(tmp_path, 100, "sweep-w0")
    executor = HeldPool()
    loop = loop_over(ledger, executor, processes=2)
    loop.unit_s = 0.001

    loop._fill()

    assert len(executor.batches) == 4 == len(loop.in_flight)
    units = [unit for ranges in executor.batches for r in ranges for unit in r]
    assert len(units) == len(set(units))  # no unit in two batches
    claimed = sorted(int(name) for name in os.listdir(tmp_path / "claims") if name.isdigit())
    assert claimed == sorted(c.block for claims in loop.in_flight.values() for c in claims)


def test_the_last_blocks_are_shared_out_in_ever_smaller_batches(tmp_path: Path) -> None:
    """Each batch takes a share of the blocks no batch holds yet, so the last batches shrink
    and some blocks wait for the process that ends first: counting the blocks in flight as
    free would make every batch claimed at the end a full one, computed by one process alone
    while the others wait."""
    ledger = Ledger.open(tmp_path, 100, "sweep-w0")
    executor = HeldPool()
    loop = loop_over(ledger, executor, processes=2)
    loop.unit_s = 0.001

    loop._fill()

    sizes = [sum(len(r) for r in ranges) for ranges in executor.batches]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0]
    assert sum(sizes) < 100


@pytest.mark.parametrize("unit_s", [None, 1.0])
def test_units_not_known_to_be_short_get_one_batch_per_process(
    tmp_path: Path, unit_s: float | None
) -> None:
    """A queued batch of long units would hold claims that another worker could compute."""
    ledger = Ledger.open(tmp_path, 100, "sweep-w0")
    executor = HeldPool()
    loop = loop_over(ledger, executor, processes=2)
    loop.unit_s = unit_s

    loop._fill()

    assert len(executor.batches) == 2
    assert len([n for n in os.listdir(tmp_path / "claims") if n.isdigit()]) == 2
