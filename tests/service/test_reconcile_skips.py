# ruff: noqa: F811  (the fixtures are imported from controller_support by name)
"""A pass skips the live runs unchanged since their last poll (runs/control/poll_memory.py).

A run is polled again when its workflow or its record changed, when a split task's progress
grew, while it waits for something in time (a merge marker, a report, logs to keep), at the
resync interval; a restarted service (or another process) skips them too, from what their rows
say of their last poll.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.backends.fake import FakeBackend
from runs.control import poll_memory
from runs.control.poll_memory import live_rows
from runs.models import Run, RunState, Task, TaskState
from tests.service.controller_support import (  # noqa: F401 (fixtures)
    PIPELINE,
    fake,
    fresh,
    home,
    launch,
    pod_log,
    poll,
    sent,
    task_dir,
    write_report,
)

pytestmark = pytest.mark.django_db


def statuses(fake: FakeBackend) -> list[str]:
    """The workflows whose status was read since the last call, and forget the calls."""
    with fake.state() as state:
        read = [args[0] for name, args in state.calls if name == "status"]
        state.calls.clear()
    return read


def running_runs(launch, fake: FakeBackend, count: int) -> list[Run]:
    """``count`` running runs, polled once since their last change; no status read since."""
    runs = [launch(PIPELINE) for _ in range(count)]
    for run in runs:
        fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    poll(fake)  # the first poll wrote the tasks running: its record changed
    statuses(fake)
    return [fresh(run) for run in runs]


@pytest.fixture
def steady(launch, fake: FakeBackend) -> list[Run]:
    """Three running runs, polled once since their last change."""
    return running_runs(launch, fake, 3)


@pytest.fixture
def read(monkeypatch) -> list[str]:
    """The ids of the runs whose rows the passes read (``live_rows``), in order."""
    found_ids: list[str] = []

    def rows(runs, limit=None):
        found = live_rows(runs, limit)
        found_ids.extend(row.pk for row in found)
        return found

    monkeypatch.setattr(poll_memory, "live_rows", rows)
    return found_ids


@pytest.fixture
def clock(fake) -> list[float]:
    """The poll memory's clock, held still: a test moves it on by changing the one value."""
    memory = poll_memory.memory_of(fake)
    assert memory is not None
    held = [memory.clock()]
    memory.clock = lambda: held[0]
    return held


def test_a_steady_pass_reads_no_status_and_no_task_whatever_the_number_of_runs(
    clock, steady, launch, fake
):
    """The clock held still: no share of the resync comes."""
    with CaptureQueriesContext(connection) as few:
        assert poll(fake) == 0
    assert statuses(fake) == []
    running_runs(launch, fake, 6)
    with CaptureQueriesContext(connection) as many:
        assert poll(fake) == 0
    assert fake.calls == [("versions", [9])]
    # One query, of the runs: no task is read of a run whose record did not change.
    assert len(many.captured_queries) == len(few.captured_queries) == 1
    tables = " ".join(q["sql"] for q in many.captured_queries)
    assert '"runs_task"' not in tables


def test_a_changed_workflow_is_polled_and_written(steady, fake):
    changed = steady[0]
    fake.set_nodes(changed.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    assert poll(fake) == 1
    assert statuses(fake) == [changed.workflow]
    assert Task.objects.get(run=changed, task_id="sweep").state == TaskState.DONE
    assert poll(fake) == 0


def test_a_record_another_writer_changed_is_polled(steady, fake):
    changed = steady[1]
    assert Run.objects.write_if_unchanged(changed, name="renamed")
    poll(fake)
    assert statuses(fake) == [changed.workflow]


def test_a_growing_progress_file_is_read_without_a_change_of_the_workflow(steady, fake):
    run = steady[0]
    progress = task_dir(run, "sweep") / "progress.jsonl"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.write_text('{"unit": 0}\n{"unit": 1}\n')
    assert poll(fake) == 1
    assert statuses(fake) == [run.workflow]
    assert Task.objects.get(run=run, task_id="sweep").units_done == 2


def test_a_run_waiting_for_a_report_is_polled_each_pass_beside_skipped_ones(steady, fake):
    waiting = steady[2]
    fake.fail_attempt(waiting.workflow, "sweep-w0", attempt=0, exit_code=137)
    poll(fake)
    assert fresh(waiting).reports_pending
    statuses(fake)
    poll(fake)
    poll(fake)
    assert statuses(fake) == [waiting.workflow, waiting.workflow]


def test_the_pass_after_the_poll_that_ended_a_wait_leaves_the_run_alone(steady, fake):
    """The poll that found the report wrote the run's record: what that poll read is kept
    with the record it left, though the run waited, so the next pass skips the run."""
    waiting = steady[2]
    fake.fail_attempt(waiting.workflow, "sweep-w0", attempt=0, exit_code=137)
    poll(fake)
    write_report(fresh(waiting), "sweep-w0", 0, oom_kills=1)
    poll(fake)
    assert fresh(waiting).reports_pending == {}
    statuses(fake)
    poll(fake)
    assert statuses(fake) == []


def test_a_run_waiting_for_a_merge_marker_is_polled_each_pass(launch, fake):
    fake.extra_workers = False  # the coordinator merges
    run, other = launch(), launch()
    fake.set_nodes(other.workflow, {"sweep-w0": "Running"})
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded"})
    poll(fake)
    poll(fake)
    assert fresh(run).merge_pending
    statuses(fake)
    poll(fake)
    assert statuses(fake) == [run.workflow]


def test_a_final_task_whose_logs_are_not_kept_keeps_its_run_polled(steady, fake):
    run = steady[0]
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    fake.fail_next("logs")  # keeping the logs of the task done fails once
    poll(fake)
    assert not Task.objects.get(run=run, task_id="sweep").logs_kept
    statuses(fake)
    poll(fake)
    assert statuses(fake) == [run.workflow]
    assert Task.objects.get(run=run, task_id="sweep").logs_kept
    poll(fake)
    assert statuses(fake) == []


ENDED_LOG = "sweep-extra(0:1)-0.log"
"""The kept log of the ended pod of ``owe_a_log_read``."""


def owe_a_log_read(run: Run, fake: FakeBackend) -> None:
    """A pod of the run's live sweep ended and its log could not be read: a poll owes it."""
    fake.set_nodes(run.workflow, {"sweep-w0": "Running", "sweep-extra(0:1)": "Succeeded"})
    unread = pod_log("sweep-extra(0:1)", "", done=False).model_copy(
        update={"unread": "500 Server Error"}
    )
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0", done=False), unread])
    poll(fake)
    statuses(fake)


def let_the_log_be_read(run: Run, fake: FakeBackend) -> None:
    """The API answers the log ``owe_a_log_read`` owed."""
    ended = pod_log("sweep-extra(0:1)", "extra done\n")
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0", done=False), ended])


def test_a_live_task_whose_log_read_failed_keeps_its_run_polled_until_the_log_is_kept(steady, fake):
    run = steady[0]
    owe_a_log_read(run, fake)
    poll(fake)  # nothing changed but the read is owed
    assert statuses(fake) == [run.workflow]
    let_the_log_be_read(run, fake)
    poll(fake)
    assert (task_dir(run, "sweep") / "logs" / ENDED_LOG).read_text() == "extra done\n"
    statuses(fake)
    poll(fake)
    assert statuses(fake) == [], "kept: skipped again"


def test_a_steady_pass_reads_the_rows_of_the_runs_written_since_the_last_not_every_run(
    steady, fake, read
):
    later = timezone.now() + 2 * poll_memory.WRITE_SLACK
    with time_machine.travel(later, tick=False):
        poll(fake)  # read what was written since the last pass, the slack before it
        read.clear()
        poll(fake)
        assert read == [], "nothing was written: no row read"
        first = fresh(steady[0])
        assert Run.objects.write_if_unchanged(first, message="noted")
        poll(fake)
        assert read == [first.pk]
    assert statuses(fake) == [first.workflow]


def test_a_change_no_pass_saw_is_found_at_the_resync_and_only_its_run_is_polled(
    steady, fake, settings, clock
):
    """What the passes read by their window could miss: a record stamped long before it
    committed, a task written without its run. The resync reads each run's row and tasks
    again: those two runs are polled, the third is not."""
    settings.SIMRUN_RESYNC_S = 60
    stamped, tasked, _untouched = steady
    long_ago = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=stamped.pk).update(
        version=F("version") + 1, message="late", updated_at=long_ago
    )
    Task.objects.filter(run=tasked, task_id="sweep").update(state=TaskState.DONE)
    poll(fake)
    assert statuses(fake) == []
    clock[0] += 61  # every run's resync came: its row and tasks read again
    poll(fake)
    assert sorted(statuses(fake)) == sorted([stamped.workflow, tasked.workflow])


def test_a_run_that_ended_unseen_is_forgotten_once_the_resync_walked_the_live_runs(
    steady, fake, settings, clock
):
    """A run ended by a write no pass read (stamped long before): the passes keep it among
    the running ones until the resync's walk ends without finding it among the live runs."""
    settings.SIMRUN_RESYNC_S = 60
    Run.objects.filter(pk=steady[0].pk).update(
        state=RunState.SUCCEEDED,
        ended_at=timezone.now(),
        updated_at=timezone.now() - timedelta(hours=1),
    )

    def asked() -> list[int]:
        """How many workflows the pass asked the versions of."""
        with fake.state() as state:
            counts = [args[0] for name, args in state.calls if name == "versions"]
            state.calls.clear()
        return counts

    asked()
    poll(fake)
    assert asked() == [3], "kept: nothing read it"
    clock[0] += 61  # the walk reads every live run: the ended one is not among them
    poll(fake)
    poll(fake)
    assert asked()[-1] == 2


def test_each_pass_reads_again_its_share_of_the_live_runs_so_all_within_the_interval(
    launch, fake, settings, clock, read
):
    """Passes 10 s apart with a 60 s resync: each reads again a sixth of the live runs, the
    next ones in order, all of them in six passes, and polls none that did not change."""
    settings.SIMRUN_RESYNC_S = 60
    runs = running_runs(launch, fake, 12)
    shares = []
    with time_machine.travel(timezone.now() + 2 * poll_memory.WRITE_SLACK, tick=False):
        poll(fake)  # the window's last read of what the first passes wrote
        for _ in range(6):
            clock[0] += 10
            read.clear()
            poll(fake)
            shares.append(read[:])
    assert [len(share) for share in shares] == [2] * 6
    assert sorted(pk for share in shares for pk in share) == sorted(run.pk for run in runs)
    assert statuses(fake) == []


def restarted() -> None:
    """What a new process of the service remembers of the polls: nothing but the rows."""
    poll_memory._memories.clear()


def test_a_restarted_service_polls_none_of_the_runs_that_did_not_change(steady, fake):
    restarted()
    with CaptureQueriesContext(connection) as queries:
        assert poll(fake) == 0
    assert statuses(fake) == []
    tables = " ".join(q["sql"] for q in queries.captured_queries)
    assert '"runs_task"."plan"' not in tables  # no task loaded
    restarted()  # another worker process reads the same rows
    poll(fake)
    assert statuses(fake) == []


def test_a_restart_polls_only_what_changed_while_the_service_was_down(steady, launch, fake):
    same = launch(PIPELINE)
    fake.set_nodes(same.workflow, {"sweep-w0": "Running"})
    poll(fake)
    poll(fake)
    statuses(fake)
    ended, renamed, progressed = steady
    fake.finish(ended.workflow)
    assert Run.objects.write_if_unchanged(renamed, name="renamed")
    progress = task_dir(progressed, "sweep") / "progress.jsonl"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.write_text('{"unit": 0}\n')
    restarted()
    poll(fake)
    assert sorted(statuses(fake)) == sorted(r.workflow for r in steady)  # not same's
    assert fresh(ended).state == RunState.SUCCEEDED
    assert Task.objects.get(run=progressed, task_id="sweep").units_done == 1
    restarted()
    poll(fake)
    assert statuses(fake) == [], "each polled once: their rows hold the new polls"


def test_a_run_whose_log_read_was_owed_at_a_restart_is_polled_after_it(steady, fake):
    run = steady[0]
    owe_a_log_read(run, fake)
    restarted()
    let_the_log_be_read(run, fake)
    poll(fake)
    assert statuses(fake) == [run.workflow]
    assert (task_dir(run, "sweep") / "logs" / ENDED_LOG).read_text() == "extra done\n"


def test_a_run_that_ends_is_seen_at_once(steady, fake):
    run = steady[0]
    fake.finish(run.workflow)
    poll(fake)
    assert fresh(run).state == RunState.SUCCEEDED
    assert statuses(fake) == [run.workflow]


def test_a_workflow_the_backend_no_longer_knows_is_polled_and_its_run_ends(steady, fake):
    """A skipped run whose row and tasks nothing wrote is still compared with its
    workflow's version at each pass: one gone from the backend has none."""
    run = steady[1]
    with fake.state() as state:
        del state.workflows[run.workflow]
    poll(fake)
    assert statuses(fake) == [run.workflow]
    assert fresh(run).state == RunState.FAILED
    assert poll(fake) == 0
    assert statuses(fake) == []


def test_a_share_of_the_resync_starts_at_its_place_in_the_live_runs_index(steady):
    """Each pass reads its share from where the last one stopped: the live runs' index must
    start there (an index condition), not scan every run created before and drop them."""
    first = Run.objects.live().order_by("created_at", "pk").first()
    assert first is not None
    share = poll_memory.walk_after((first.created_at, first.pk)).order_by("created_at", "pk")
    sql, params = share[:2].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a few rows: as with many
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "run_live_idx" in plan and "Index Cond: (created_at >=" in plan, plan
