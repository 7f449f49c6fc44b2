"""The loop around the controller: one reconcile at a time, wake-ups, crashes, restarts, races."""
# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from harness.tasktypes import task_types
from runs.backends import get_backend
from runs.backends.base import RETRYING_PHASE
from runs.backends.fake import FakeBackend
from runs.common.errors import Conflict
from runs.control import (
    cancelling,
    locks,
    polling,
    reconciling,
    recovery,
    settling,
    submitting,
    waking,
)
from runs.models import Attempt, Observation, Run, RunState, Task
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.service.controller_support import (  # noqa: F401
    PIPELINE,
    SWEEP,
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
    states,
    write_report,
)

pytestmark = pytest.mark.django_db

SWEEP_DONE = {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"}


# One reconcile at a time, and wake-ups


def test_a_reconcile_while_another_holds_the_lock_does_nothing(fake, monkeypatch):
    monkeypatch.setattr(reconciling, "reconcile_pass", lambda **_: pytest.fail("a second pass"))
    with locks.hold(reconciling.RECONCILE_LOCK) as held:
        assert held
        assert reconciling.reconcile(backend=fake) is None


def test_wake_ups_do_not_pile_up_until_a_reconcile_starts(fake, sent):
    for _ in range(5):
        waking.wake()
    assert sent["runs.tasks.reconcile"] == [()]
    assert reconciling.reconcile(backend=fake) == 0
    waking.wake()
    assert sent["runs.tasks.reconcile"] == [(), ()], "a reconcile lowers the flag"


def test_a_wake_up_during_a_pass_makes_one_more_pass(fake, sent, monkeypatch):
    passes = []

    def one_pass(*, backend, schedule):
        passes.append(backend)
        if len(passes) == 1:
            waking.wake()
        return 1

    monkeypatch.setattr(reconciling, "reconcile_pass", one_pass)
    assert reconciling.reconcile(backend=fake) == 2
    assert len(passes) == 2


def test_a_wake_up_the_broker_refuses_is_logged_and_lets_later_ones_through(
    fake, monkeypatch, caplog
):
    from runs import tasks

    def refused() -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.reconcile, "delay", refused)
    waking.wake()
    assert "cannot wake the control loop" in caplog.text
    assert locks.raise_flag(waking.WAKE_FLAG, ttl_s=60), "the flag was lowered again"


def test_the_backend_wakes_the_loop_through_its_subscription(fake, sent):
    from runs.tasks import follow_backend

    follow_backend()
    assert fake.callbacks == [waking.wake]
    assert sent["runs.tasks.recover"] == [()]
    fake.notify()
    assert sent["runs.tasks.reconcile"] == [()]


def test_a_run_still_submitting_is_left_to_its_submission(launch, fake, django_assert_num_queries):
    run = launch(submit=False)
    with django_assert_num_queries(3):  # the live runs' few fields, the run, its tasks
        assert poll(fake) == 0
    assert fake.calls == [] and fresh(run).state == RunState.SUBMITTING


def test_the_submission_task_does_nothing_while_another_process_submits_the_run(launch, fake):
    from runs import tasks

    run = launch(submit=False)
    with locks.hold(f"submit-{run.id}"):
        tasks.submit_run.run(run.id)
    assert fresh(run).state == RunState.SUBMITTING and fake.called("submit") == []
    tasks.submit_run.run(run.id)
    assert fresh(run).state == RunState.RUNNING


# A run that crashes the loop


def test_a_record_that_cannot_be_read_is_logged_and_pushed_aside_while_others_go_on(
    launch, fake, caplog, settings
):
    settings.SIMRUN_POLL_S = 5
    broken, healthy = launch(), launch()
    Task.objects.filter(run=broken).update(plan={"cores": "many"})
    fake.set_nodes(healthy.workflow, {"sweep-w0": "Running"})
    start = timezone.now()
    with caplog.at_level(logging.ERROR), time_machine.travel(start, tick=False):
        assert poll(fake) == 1
    assert f"reconciling run {broken.id} failed; it is pushed aside" in caplog.text
    assert states(healthy) == {"sweep": "running"}
    broken = fresh(broken)
    assert broken.reconcile_failures == 1
    assert broken.reconcile_after == start + timedelta(seconds=10)
    with time_machine.travel(start + timedelta(seconds=9), tick=False):
        poll(fake)
    assert fresh(broken).reconcile_failures == 1, "not tried while pushed aside"
    with time_machine.travel(start + timedelta(seconds=11), tick=False):
        poll(fake)
    broken = fresh(broken)
    assert broken.reconcile_failures == 2
    assert broken.reconcile_after == start + timedelta(seconds=11 + 20), "longer each time"
    Task.objects.filter(run=broken).update(plan=Task.objects.get(run=healthy).plan)
    with time_machine.travel(start + timedelta(seconds=40), tick=False):
        poll(fake)
    broken = fresh(broken)
    assert broken.reconcile_failures == 0 and broken.reconcile_after is None


def test_a_write_that_fails_in_a_batch_pushes_its_run_aside_and_the_others_are_written(
    launch, fake, caplog
):
    first, broken, last = launch(), launch(), launch()
    for run in (first, broken, last):
        fake.set_nodes(run.workflow, {"sweep-w0": RETRYING_PHASE})
        # The node name of the broken run's attempt does not fit its column: the write raises.
        node = "n" * 300 if run == broken else "node-a"
        fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=143, node=node)
    version = fresh(broken).version
    with caplog.at_level(logging.ERROR):
        assert poll(fake) == 2
    assert "writing them one by one" in caplog.text
    assert states(first) == states(last) == {"sweep": "retrying"}
    assert Attempt.objects.filter(task__run__in=[first, last]).count() == 2
    broken = fresh(broken)
    assert broken.version == version and states(broken) == {"sweep": "waiting"}
    assert broken.reconcile_failures == 1
    assert not Attempt.objects.filter(task__run=broken).exists()


def test_a_crash_pushes_a_run_aside_without_making_a_cancel_conflict(launch, fake):
    run = launch()
    before = fresh(run)
    fake.fail_next("status")
    poll(fake)
    assert fresh(run).reconcile_failures == 1
    cancelling.request_cancel(before)
    assert fresh(run).state == RunState.CANCELLED


def test_a_backend_unavailable_pushes_a_run_aside_briefly_and_a_broken_record_for_long(
    launch, fake, settings, caplog
):
    settings.SIMRUN_POLL_S = 5
    outage, broken = launch(), launch()
    Run.objects.filter(pk__in=[outage.pk, broken.pk]).update(reconcile_failures=7)
    Task.objects.filter(run=broken).update(plan={"cores": "many"})
    fake.fail_next("status", "BackendUnavailable", "the Kubernetes API did not answer")
    start = timezone.now()
    with caplog.at_level(logging.WARNING), time_machine.travel(start, tick=False):
        poll(fake)
    assert fresh(outage).reconcile_after == start + timedelta(seconds=30), "capped at 30 s"
    assert fresh(broken).reconcile_after == start + timedelta(seconds=600)
    assert f"reconciling run {outage.id}: the Kubernetes API did not answer" in caplog.text
    fake.set_nodes(outage.workflow, {"sweep-w0": "Running"})
    with time_machine.travel(start + timedelta(seconds=31), tick=False):
        poll(fake)
    assert states(outage) == {"sweep": "running"} and fresh(outage).reconcile_failures == 0


def test_a_cancel_racing_a_reconcile_retries_instead_of_conflicting(launch, fake):
    run = launch()
    stale = fresh(run)
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    assert poll(fake) == 1, "the reconcile wrote the run after the cancel read it"
    cancelling.request_cancel(stale)
    run = fresh(run)
    assert run.state == RunState.CANCELLED and run.pending_cancel
    assert states(run) == {"sweep": "skipped"}


def test_a_cancel_of_a_run_that_ended_meanwhile_conflicts(launch, fake):
    run = launch()
    stale = fresh(run)
    fake.set_nodes(run.workflow, SWEEP_DONE)
    fake.set_phase(run.workflow, "Succeeded")
    poll(fake)
    with pytest.raises(Conflict, match="has ended"):
        cancelling.request_cancel(stale)
    assert fresh(run).state == RunState.SUCCEEDED


# Cost


def test_a_pass_reads_every_live_run_in_a_constant_number_of_queries(
    launch, fake, django_assert_num_queries
):
    runs = [launch(PIPELINE) for _ in range(3)]
    for run in runs:
        fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    with django_assert_num_queries(2):
        poll(fake)
    runs += [launch(PIPELINE) for _ in range(9)]
    for run in runs[3:]:
        fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    with django_assert_num_queries(2):
        assert poll(fake) == 0


def test_a_pass_writes_a_constant_number_of_queries_per_changed_run(launch, fake):
    def changed_pass(count: int) -> int:
        runs = [launch(PIPELINE) for _ in range(count)]
        poll(fake)
        for run in runs:
            fake.set_nodes(run.workflow, {"sweep-w0": "Running", "summary": "Pending"})
        with CaptureQueriesContext(connection) as captured:
            assert poll(fake) == count
        for run in runs:
            fake.finish(run.workflow)
        poll(fake)
        return len(captured.captured_queries)

    assert changed_pass(6) - changed_pass(3) == 3 * (changed_pass(2) - changed_pass(1))


# A restart: the database alone


def drive(owner, backend: FakeBackend, *, restart: bool) -> list[tuple]:
    """Runs through a restart (or not) and what became of them."""

    def create(spec) -> Run:
        text = yaml.safe_dump(spec, sort_keys=False)
        return create_run(spec=parse_spec(text, types=task_types()), owner=owner, backend=backend)

    backend.add_node("node-a")
    sweep, pipeline = create({**SWEEP, "reserve_node": True}), create(PIPELINE)
    late = create(SWEEP)
    for run in (sweep, pipeline):
        submitting.submit(run.id, backend=backend)
    sweep, pipeline = fresh(sweep), fresh(pipeline)
    backend.set_nodes(sweep.workflow, {"sweep-w0": "Running"})
    backend.set_nodes(pipeline.workflow, {"sweep-w0": "Retrying"})
    backend.fail_attempt(pipeline.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    reconciling.reconcile_pass(backend=backend)
    if restart:
        get_backend.cache_clear()
        backend = FakeBackend(state_file=backend.state_file)
        recovery.recover(backend=backend)
    else:
        submitting.submit(late.id, backend=backend)
    write_report(pipeline, "sweep-w0", 1)
    for run in (sweep, pipeline, fresh(late)):
        backend.finish(run.workflow)
    reconciling.reconcile_pass(backend=backend)
    return [
        (
            r.state,
            r.message,
            r.oom_kills,
            r.live,
            states(r),
            sorted(Observation.objects.filter(run=r).values_list("worker", "attempt", "oom")),
        )
        for r in map(fresh, (sweep, pipeline, late))
    ]


def test_a_restarted_service_continues_from_the_database_alone(owner, home, sent, tmp_path: Path):
    uninterrupted = drive(owner, FakeBackend(state_file=tmp_path / "a.json"), restart=False)
    restarted = drive(owner, FakeBackend(state_file=tmp_path / "b.json"), restart=True)
    assert restarted == uninterrupted
    assert [outcome[0] for outcome in restarted] == [RunState.SUCCEEDED] * 3
    assert restarted[1][2] == {"sweep-w0": [0]}
    assert restarted[1][5] == [("sweep-w0", 0, True), ("sweep-w0", 1, False)]


# Races and locks


def reconcile_in_thread(run_id: str, backend, results: list, barrier: threading.Barrier) -> None:
    try:
        run = Run.objects.get(pk=run_id)
        tasks = list(run.tasks.all())
        barrier.wait(timeout=30)
        results.append(polling.reconcile_run(run, tasks, backend=backend))
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_two_reconciles_racing_on_one_run_one_wins_and_the_other_changes_nothing(launch, fake):
    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True})
    fake.finish(run.workflow)
    version = fresh(run).version
    barrier = threading.Barrier(2)
    results: list[bool] = []
    threads = [
        threading.Thread(target=reconcile_in_thread, args=(run.id, fake, results, barrier))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results) == [False, True]
    run = fresh(run)
    assert run.state == RunState.SUCCEEDED and states(run) == {"sweep": "done"}
    assert fake.called("stop") == [[run.workflow]] and fake.called("unreserve") == [
        ["node-a", run.id]
    ]
    assert not run.pending_cancel and not run.pending_release and not run.pending_logs
    assert run.version == version + 2, "the terminal record, then its settled flags"


@pytest.mark.django_db(transaction=True)
def test_no_backend_call_is_made_inside_a_transaction(launch, fake):
    inside: list[str] = []
    fake.on_call = lambda method: connection.in_atomic_block and inside.append(method)
    fake.add_node("node-a")
    fake.runs_images = True
    run = launch({**PIPELINE, "reserve_node": True, "environment": {"packages": ["numpy"]}})
    fake.set_nodes(run.workflow, {"sweep-w0": "Retrying"})
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    poll(fake)
    fake.finish(run.workflow)
    fake.fail_next("unreserve")
    poll(fake)
    poll(fake)
    other = launch(SWEEP)
    cancelling.request_cancel(other)
    settling.settle(other.id, backend=fake)
    recovery.recover(backend=fake)
    assert fresh(run).state == RunState.SUCCEEDED and not fresh(run).live
    assert {name for name, _ in fake.calls} >= {"status", "stop", "unreserve", "cancel", "logs"}
    assert inside == []
