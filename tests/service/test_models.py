"""The record: constraints of every model, compare-and-set writes, the live runs."""

from __future__ import annotations

import re

import pytest
from django.db import DataError, IntegrityError, transaction
from django.utils import timezone

from runs.models import (
    Attempt,
    Observation,
    Run,
    RunState,
    Snapshot,
    Task,
    TaskKind,
    new_run_id,
)

pytestmark = pytest.mark.django_db

PLAN = {"cores": 1, "memory_gb": 1.0, "base_gb": 0.1, "per_worker_gb": 0.5, "retry_memory_gb": 2.0}


def make_run(owner, **fields) -> Run:
    return Run.objects.create(owner=owner, spec={"tasks": {}}, backend="fake", **fields)


def make_task(run, task_id="sweep", **fields) -> Task:
    values = {"kind": TaskKind.SPLIT, "type": "squares", "plan": PLAN, "units_total": 10}
    values.update(fields)
    return Task.objects.create(run=run, task_id=task_id, **values)


def refuses(create) -> None:
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        create()


def test_run_ids_are_short_valid_kubernetes_names():
    ids = {new_run_id() for _ in range(500)}
    assert len(ids) == 500
    assert all(re.fullmatch(r"[a-z][a-z0-9]{9}", i) for i in ids)


def test_a_new_run_is_submitting_and_live(owner):
    run = make_run(owner)
    assert run.state == RunState.SUBMITTING
    assert run.live and not run.ended
    assert list(Run.objects.live()) == [run]


def test_an_ended_run_needs_its_end_time_and_a_live_one_has_none(owner):
    refuses(lambda: make_run(owner, state=RunState.SUCCEEDED))
    refuses(lambda: make_run(owner, state=RunState.RUNNING, ended_at=timezone.now()))
    assert make_run(owner, state=RunState.FAILED, ended_at=timezone.now()).ended


def test_local_commands_is_direct_docker_or_unset(owner):
    refuses(lambda: make_run(owner, local_commands="podman"))
    assert make_run(owner, local_commands="docker").local_commands == "docker"


def test_live_runs_are_the_unended_and_those_with_work_pending(owner):
    now = timezone.now()
    running = make_run(owner, state=RunState.RUNNING)
    done = make_run(owner, state=RunState.SUCCEEDED, ended_at=now)
    logs = make_run(owner, state=RunState.FAILED, ended_at=now, pending_logs=True)
    release = make_run(owner, state=RunState.CANCELLED, ended_at=now, pending_release=True)
    cancel = make_run(owner, state=RunState.CANCELLED, ended_at=now, pending_cancel=True)
    assert set(Run.objects.live()) == {running, logs, release, cancel}
    assert done not in Run.objects.live()
    assert set(Run.objects.ended()) == {done, logs, release, cancel}


def test_a_user_sees_their_own_runs_and_staff_see_all(owner, stranger, staff):
    mine, theirs = make_run(owner), make_run(stranger)
    assert list(Run.objects.visible_to(owner)) == [mine]
    assert set(Run.objects.visible_to(staff)) == {mine, theirs}


def test_write_if_unchanged_writes_and_bumps_the_version(owner):
    run = make_run(owner)
    assert Run.objects.write_if_unchanged(run, state=RunState.RUNNING, workflow="simrun-x")
    assert run.version == 1 and run.state == RunState.RUNNING
    stored = Run.objects.get(pk=run.pk)
    assert (stored.version, stored.state, stored.workflow) == (1, "running", "simrun-x")


def test_write_if_unchanged_refuses_a_stale_copy(owner):
    run = make_run(owner)
    stale = Run.objects.get(pk=run.pk)
    assert Run.objects.write_if_unchanged(run, message="first")
    assert not Run.objects.write_if_unchanged(stale, message="second")
    assert stale.message == "" and stale.version == 0
    assert Run.objects.get(pk=run.pk).message == "first"


def test_write_if_unchanged_of_a_deleted_run_writes_nothing(owner):
    run = make_run(owner)
    Run.objects.filter(pk=run.pk).delete()
    assert not Run.objects.write_if_unchanged(run, message="gone")


def test_a_task_id_is_unique_per_run_not_globally(owner):
    first, second = make_run(owner), make_run(owner)
    make_task(first)
    make_task(second)
    refuses(lambda: make_task(first))


@pytest.mark.parametrize("task_id", ["Sweep", "1sweep", "a_b", "x" * 41, ""])
def test_a_task_id_must_be_a_pod_name_part(owner, task_id):
    refuses(lambda: make_task(make_run(owner), task_id=task_id))


def test_units_done_never_exceed_the_total(owner):
    refuses(lambda: make_task(make_run(owner), units_done=11, units_total=10))


def test_a_typed_task_has_its_type_and_a_command_task_may_not(owner):
    run = make_run(owner)
    refuses(lambda: make_task(run, kind=TaskKind.SPLIT, type=""))
    assert make_task(run, task_id="cmd", kind=TaskKind.COMMAND, type="").kind == "command"


def test_an_attempt_is_unique_per_task_worker_and_number(owner):
    task = make_task(make_run(owner))
    Attempt.objects.create(task=task, worker="sweep-w0", attempt=0)
    Attempt.objects.create(task=task, worker="sweep-w0", attempt=1)
    Attempt.objects.create(task=task, worker="sweep-w1", attempt=0)
    refuses(lambda: Attempt.objects.create(task=task, worker="sweep-w0", attempt=0))


def observation(task, **fields) -> Observation:
    values = {"task_type": "squares", "run": task.run, "task": task, "worker": "sweep-w0"}
    values.update({"attempt": 0, "processes": 2, "per_worker_gb": 0.5, "peak_bytes": 2**30})
    values.update(fields)
    return Observation.objects.create(**values)


def test_an_attempt_is_observed_once(owner):
    task = make_task(make_run(owner))
    observation(task)
    refuses(lambda: observation(task))
    assert observation(task, attempt=1).attempt == 1


def test_an_observation_has_at_least_one_process_and_no_negative_peak(owner):
    task = make_task(make_run(owner))
    refuses(lambda: observation(task, processes=0))
    refuses(lambda: observation(task, worker="w", peak_bytes=-1))


def test_the_peak_per_process_falls_back_to_the_limit_of_an_oom_kill(owner):
    task = make_task(make_run(owner))
    assert observation(task).peak_gb_per_process == 0.5
    killed = observation(task, attempt=1, peak_bytes=None, limit_bytes=4 * 2**30, oom=True)
    assert killed.peak_gb_per_process == 2.0


def test_observations_outlive_their_run(owner):
    task = make_task(make_run(owner))
    kept = observation(task)
    task.run.delete()
    kept.refresh_from_db()
    assert kept.run is None and kept.task is None


def test_a_snapshot_is_a_sha256_once_per_owner(owner, stranger):
    digest = "a" * 64
    Snapshot.objects.create(digest=digest, owner=owner)
    Snapshot.objects.create(digest=digest, owner=stranger)
    refuses(lambda: Snapshot.objects.create(digest=digest, owner=owner))
    refuses(lambda: Snapshot.objects.create(digest="../etc", owner=owner))
