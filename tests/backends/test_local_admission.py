"""Admission on the local backend: checked at start against the machine, FIFO with a backfill
that never delays the head, and a reason for every waiting task."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.backends.local.admission import (
    Demand,
    Held,
    admit,
    delays,
    fair_order,
)
from runs.backends.local.backend import LocalBackend, workflow_name
from runs.backends.waiting import named_runs, unnamed
from tests.backends.local_fixtures import (
    ended,
    phase,
    plan,
    read_log,
    shell,
    stepping,
    submit,
    until_flag,
)
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


def demand(run: str, cores: int, memory_gb: float = 1.0) -> Demand:
    return Demand(run=run, node="t", cores=cores, memory_gb=memory_gb)


def test_a_task_larger_than_the_machine_is_refused_and_the_queue_goes_on():
    big, small = demand("big", 4), demand("small", 1)

    found = admit([big, small], [], cores=2, memory_gb=8)

    assert found.start == [small]
    assert found.refused[big].startswith("it needs 4 cores but this machine has 2")


def test_a_small_task_backfills_beside_the_head_when_it_cannot_delay_it():
    held = [Held("a", 2, 1.0)]
    head, small = demand("head", 2), demand("small", 1)

    found = admit([head, small], held, cores=3, memory_gb=8)

    assert found.start == [small]
    assert found.waiting[head] == "waits for 2 cores; run a holds 2 of 3"


def test_no_backfill_takes_the_cores_the_head_gets_when_a_running_task_ends():
    held = [Held("a", 2, 1.0), Held("b", 1, 1.0)]
    head, small = demand("head", 3), demand("small", 1)

    found = admit([head, small], held, cores=4, memory_gb=8)

    assert found.start == []
    assert found.waiting[head] == "waits for 3 cores; runs a and b hold 3 of 4"
    assert found.waiting[small] == (
        "waits behind t of run head, first in the queue, which starting now could delay"
    )
    assert delays(head, small, held, free_cores=1, free_gb=5.0)


def test_memory_is_admitted_like_cores():
    held = [Held("a", 1, 6.0)]
    head = demand("head", 1, memory_gb=4.0)

    found = admit([head], held, cores=4, memory_gb=8)

    assert found.waiting[head] == "waits for 4 GiB of memory; run a holds 6 of 8.0 GiB"


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2, memory_gb=8, grace_s=1
    )


def test_after_a_restart_with_fewer_cores_a_larger_task_fails_and_later_runs_start(
    backend, tmp_path
):
    wide = LocalBackend(store=backend.store, scratch=backend.scratch, cores=4, memory_gb=8)
    submit(wide, "wide", {"t": {"command": ["true"]}}, {"t": plan(cores=4)})
    submit(wide, "narrow", {"t": {"command": shell("echo ran")}}, {"t": plan(cores=1)})
    with stepping(backend):
        wait_for(lambda: ended(backend, "wide") and ended(backend, "narrow"), what="the ends")
    assert phase(backend, "narrow") == "Succeeded"
    assert read_log(backend, "narrow", "t", "t") == "ran\n"
    status = backend.status(workflow_name("wide"))
    assert status.phase == "Failed"
    [refused] = status.failed["t"]
    assert refused.message == (
        "not started: it needs 4 cores but this machine has 2, so it can never start here: "
        "lower its plan"
    )


def test_a_waiting_task_says_what_it_waits_for_and_who_holds_it(backend, tmp_path):
    flag = tmp_path / "go"
    with stepping(backend):
        submit(backend, "holder", {"t": {"command": until_flag(flag)}}, {"t": plan(cores=2)})
        wait_for(lambda: phase(backend, "holder", "t") == "Running", what="the holder")
        submit(backend, "waiter", {"t": {"command": ["true"]}}, {"t": plan(cores=2)})
        reason = wait_for(
            lambda: backend.status(workflow_name("waiter")).waiting.get("t"), what="a reason"
        )
        assert reason == "waits for 2 cores; run holder holds 2 of 2"
        flag.touch()
        wait_for(lambda: ended(backend, "waiter"), what="the waiter's end")
    assert backend.status(workflow_name("waiter")).waiting == {}


# Fair admission: a share per user.


def owned(run: str, owner: int, cores: int, memory_gb: float = 1.0) -> Demand:
    return Demand(run=run, node="t", cores=cores, memory_gb=memory_gb, owner=owner)


def test_one_users_runs_wait_their_turn_behind_another_users_first():
    """Four runs of user 1 that each take every core, submitted before user 2's one-core run:
    first come first served made user 2 wait for all four."""
    held = [Held("a1", 2, 1.0, owner=1)]
    queue = [owned("a2", 1, 2), owned("a3", 1, 2), owned("a4", 1, 2), owned("b1", 2, 1)]

    order = fair_order(queue, held, cores=2, memory_gb=8)
    found = admit(queue, held, cores=2, memory_gb=8)

    assert [d.run for d in order] == ["b1", "a2", "a3", "a4"]
    assert found.start == [] and list(found.waiting)[0].run == "b1"  # the head: user 2's
    # a1 ended: both hold nothing, and user 1 started last: user 2's turn.
    assert admit(queue, [], cores=2, memory_gb=8, last_start={1: 100.0}).start == [
        owned("b1", 2, 1)
    ]


def test_users_take_turns_by_the_share_each_holds_the_earlier_first_between_equals():
    held = [Held("a1", 1, 1.0, owner=1)]
    queue = [owned("a2", 1, 1), owned("b1", 2, 1), owned("b2", 2, 1), owned("c1", 3, 4, 4.0)]

    order = fair_order(queue, held, cores=4, memory_gb=8)

    # Shares: user 1 holds 1/4; user 2 none; user 3 none. User 2's first is earlier than
    # user 3's; then user 3 (0) before user 2 (1/4, a tie broken by the earlier node) ...
    assert [d.run for d in order] == ["b1", "c1", "a2", "b2"]


def test_the_head_is_never_overtaken_even_by_its_users_own_later_nodes():
    held = [Held("a1", 1, 1.0, owner=1)]
    head, small = owned("b1", 2, 2), owned("a2", 1, 1)

    found = admit([small, head], held, cores=2, memory_gb=8)

    assert found.start == []  # a2 would take the core b1 gets when a1 ends
    assert list(found.waiting) == [head, small]


# Who holds the cores, as another user reads it.


@pytest.mark.parametrize(
    ("mine", "read"),
    [
        ({"a", "b"}, "waits for 3 cores; runs a and b hold 3 of 4"),
        ({"a"}, "waits for 3 cores; run a and other users' runs hold 3 of 4"),
        (set(), "waits for 3 cores; other users' runs hold 3 of 4"),
    ],
)
def test_the_holders_are_named_only_to_their_owner(mine, read):
    message = "waits for 3 cores; runs a and b hold 3 of 4"
    assert named_runs(message) == {"a", "b"}
    assert unnamed(message, mine.__contains__) == read


def test_the_head_a_node_waits_behind_is_named_only_to_its_owner():
    message = "waits behind t of run head, first in the queue, which starting now could delay"
    assert named_runs(message) == {"head"}
    assert unnamed(message, {"head"}.__contains__) == message
    assert unnamed(message, set().__contains__) == (
        "waits behind a node of another user's run, first in the queue, which starting now "
        "could delay"
    )
