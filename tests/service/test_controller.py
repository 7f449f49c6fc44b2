"""How the record of a run follows its workflow (the rulings), against the fake backend."""
# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

import pytest
import time_machine
from django.utils import timezone

from runs.backends.base import RETRYING_PHASE, TaskPlan
from runs.common import store
from runs.common.errors import Conflict
from runs.models import Attempt, Observation, Run, RunState, Task, TaskState
from tests.service.controller_support import (  # noqa: F401
    PIPELINE,
    SWEEP,
    fake,
    fresh,
    home,
    launch,
    pod_log,
    poll,
    sent,
    states,
    task_dir,
    write_marker,
    write_report,
)

pytestmark = pytest.mark.django_db

SWEEP_DONE = {
    "sweep-w0": "Succeeded",
    "sweep-extra(0:1)": "Succeeded",
    "sweep-extra(1:2)": "Succeeded",
    "sweep-merge": "Succeeded",
}


def plan(run: Run, task_id: str = "sweep") -> TaskPlan:
    return TaskPlan.model_validate(Task.objects.get(run=run, task_id=task_id).plan)


# Submitted, running, done


def test_a_submitted_run_is_running_with_its_tasks_waiting_for_pods(launch, fake):
    run = launch()
    assert run.state == RunState.RUNNING and run.workflow == f"simrun-{run.id}"
    assert poll(fake) == 0
    assert states(run) == {"sweep": "waiting"}


def test_the_task_states_are_stored_at_every_poll(launch, fake):
    run = launch(PIPELINE)
    fake.set_phase(run.workflow, "Running")
    fake.set_nodes(run.workflow, {"sweep-w0": "Pending"})
    assert poll(fake) == 1
    assert states(run) == {"sweep": "queued", "summary": "waiting", "plot": "waiting"}
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    assert states(run) == {"sweep": "running", "summary": "waiting", "plot": "waiting"}
    sweep = Task.objects.get(run=run, task_id="sweep")
    assert sweep.started_at is not None and sweep.ended_at is None
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    fake.set_nodes(run.workflow, {"summary": "Running"})
    poll(fake)
    assert states(run) == {"sweep": "done", "summary": "running", "plot": "waiting"}
    assert Task.objects.get(run=run, task_id="sweep").ended_at is not None


def test_when_every_task_is_done_the_run_succeeded_its_workflow_is_stopped_and_node_released(
    launch, fake
):
    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True})
    assert run.reserved_node == "node-a" and fake.reserved_by("node-a") == run.id
    fake.set_nodes(run.workflow, SWEEP_DONE)
    assert poll(fake) == 1
    run = fresh(run)
    assert run.state == RunState.SUCCEEDED and run.ended_at is not None and run.message == ""
    assert states(run) == {"sweep": "done"}
    assert fake.called("stop") == [[run.workflow]]
    assert fake.called("unreserve") == [["node-a", run.id]]
    assert fake.reserved_by("node-a") is None
    assert not run.pending_cancel and not run.pending_release
    assert Task.objects.get(run=run).units_done == 6


def test_when_a_task_failed_the_run_failed_with_its_reason_and_the_workflow_is_stopped(
    launch, fake
):
    fake.add_node("node-a")
    run = launch({**PIPELINE, "reserve_node": True})
    fake.set_nodes(run.workflow, {"sweep-w0": "Running", "sweep-extra(0:1)": "Running"})
    poll(fake)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=3)
    fake.set_nodes(run.workflow, {"sweep-w0": "Failed"})
    poll(fake)
    run = fresh(run)
    assert run.state == RunState.FAILED
    assert (
        run.message
        == "task sweep failed: sweep-w0 (attempt 0) exited 3 (a unit or the merge failed)"
    )
    assert states(run) == {"sweep": "failed", "summary": "skipped", "plot": "skipped"}
    assert fake.called("stop") == [[run.workflow]] and fake.called("cancel") == []
    assert fake.reserved_by("node-a") is None
    attempt = Attempt.objects.get(task__run=run, worker="sweep-w0")
    assert (attempt.worker, attempt.attempt, attempt.exit_code) == ("sweep-w0", 0, 3)
    assert not attempt.oom_killed and not attempt.evicted


def test_a_task_done_records_the_attempts_that_succeeded_with_exit_0_and_their_node(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": RETRYING_PHASE, "sweep-extra(0:1)": "Running"})
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    poll(fake)
    with fake.state() as state:
        state.workflows[run.workflow].hosts.update({"sweep-w0": "node-b", "sweep-merge": "node-c"})
    fake.set_nodes(
        run.workflow,
        {"sweep-w0": "Succeeded", "sweep-extra(0:1)": "Succeeded", "sweep-extra(1:2)": "Failed"},
    )
    fake.set_nodes(run.workflow, {"sweep-merge": "Succeeded"})
    poll(fake)
    found = {
        (a.worker, a.attempt): (a.phase, a.exit_code, a.node_name, a.memory_gb)
        for a in Attempt.objects.filter(task__run=run)
    }
    retried = plan(run).retry_memory_gb
    assert found[("sweep-w0", 0)][:2] == ("Failed", 137)
    assert found[("sweep-w0", 1)] == ("Succeeded", 0, "node-b", retried)
    assert found[("sweep-merge", 0)][:3] == ("Succeeded", 0, "node-c")
    assert found[("sweep-w1", 0)][:2] == ("Succeeded", 0)
    assert ("sweep-w2", 0) not in found


def test_a_failed_merge_fails_the_task_and_the_run(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Failed"})
    fake.fail_attempt(run.workflow, "sweep-merge", attempt=0, exit_code=3)
    poll(fake)
    assert fresh(run).message == (
        "task sweep failed: sweep-merge (attempt 0) exited 3 (a unit or the merge failed)"
    )


def test_a_failed_extra_worker_does_not_fail_the_run(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running", "sweep-extra(0:1)": "Failed"})
    fake.fail_attempt(run.workflow, "sweep-w1", attempt=0, exit_code=3)
    poll(fake)
    assert fresh(run).state == RunState.RUNNING and states(run) == {"sweep": "running"}
    assert Attempt.objects.get(task__run=run, phase="Failed").worker == "sweep-w1"
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    poll(fake)
    assert fresh(run).state == RunState.SUCCEEDED


def test_the_service_not_the_workflow_decides_the_run(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {**SWEEP_DONE, "sweep-extra(0:1)": "Failed"})
    fake.set_phase(run.workflow, "Failed")
    poll(fake)
    assert fresh(run).state == RunState.SUCCEEDED


def test_a_run_whose_workflow_ended_before_its_tasks_did_failed(launch, fake):
    run = launch(PIPELINE)
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    fake.set_phase(run.workflow, "Error", "workflow shutdown")
    poll(fake)
    run = fresh(run)
    assert run.state == RunState.FAILED
    assert run.message.startswith(
        "the workflow ended Error: workflow shutdown before tasks sweep, summary, plot finished"
    )
    assert states(run) == {"sweep": "failed", "summary": "skipped", "plot": "skipped"}


def test_a_poll_that_sees_nothing_new_writes_nothing(launch, fake, django_assert_num_queries):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    version = fresh(run).version
    with django_assert_num_queries(2):
        assert poll(fake) == 0
    assert fresh(run).version == version


# The merge of a coordinator that merges


@pytest.fixture
def merging(launch, fake):
    """A run on a backend without extra workers: its coordinator merges."""
    fake.extra_workers = False
    run = launch()
    assert plan(run).coordinator_merges
    return run


def test_a_coordinator_that_merged_is_done_with_the_marker(merging, fake):
    fake.set_nodes(merging.workflow, {"sweep-w0": "Succeeded"})
    write_marker(merging, "sweep")
    poll(fake)
    assert fresh(merging).state == RunState.SUCCEEDED
    assert fresh(merging).merge_pending == {}


def test_without_the_marker_the_task_waits_for_it_up_to_the_grace_then_fails(
    merging, fake, settings
):
    settings.SIMRUN_MERGE_MARKER_GRACE_S = 120
    fake.set_nodes(merging.workflow, {"sweep-w0": "Succeeded"})
    fake.set_phase(merging.workflow, "Succeeded")
    with time_machine.travel(1_000_000, tick=False):
        poll(fake)
    run = fresh(merging)
    assert run.state == RunState.RUNNING, "a run is not failed for its phase while a merge waits"
    assert states(run) == {"sweep": "running"}
    assert run.merge_pending == {"sweep": 1_000_000}
    assert "waiting for out/.simrun-merged" in Task.objects.get(run=run).message
    with time_machine.travel(1_000_119, tick=False):
        poll(fake)
    assert fresh(merging).merge_pending == {"sweep": 1_000_000}, "the first poll's time is kept"
    assert fresh(merging).state == RunState.RUNNING
    with time_machine.travel(1_000_121, tick=False):
        poll(fake)
    run = fresh(merging)
    assert run.state == RunState.FAILED and states(run) == {"sweep": "failed"}
    assert "wrote no out/.simrun-merged within 120 s" in run.message
    assert "does not merge" in run.message


def test_a_marker_written_during_the_wait_makes_the_task_done(merging, fake):
    fake.set_nodes(merging.workflow, {"sweep-w0": "Succeeded"})
    poll(fake)
    assert fresh(merging).state == RunState.RUNNING
    write_marker(merging, "sweep")
    poll(fake)
    assert fresh(merging).state == RunState.SUCCEEDED


# Kills for memory (Rulings 34, 35, 39)


def test_an_oom_killed_attempt_is_stored_and_its_pod_retried(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": RETRYING_PHASE})
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    poll(fake)
    run = fresh(run)
    assert run.state == RunState.RUNNING and run.oom_kills == {"sweep-w0": [0]}
    assert states(run) == {"sweep": "retrying"}
    attempt = Attempt.objects.get(task__run=run)
    assert attempt.oom_killed and attempt.oom_evidence == "OOMKilled"
    assert attempt.memory_gb == plan(run).memory_gb


def test_an_exit_137_whose_report_counts_oom_kills_is_a_kill_for_memory(launch, fake):
    run = launch()
    write_report(run, "sweep-w0", 0, oom_kills=2)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137)
    poll(fake)
    assert fresh(run).oom_kills == {"sweep-w0": [0]}
    attempt = Attempt.objects.get(task__run=run)
    assert attempt.oom_killed and "2 OOM kill" in attempt.oom_evidence and not attempt.evicted


def test_an_exit_137_without_the_oom_killers_evidence_is_no_kill_for_memory(launch, fake):
    run = launch()
    limit = 2**30
    write_report(run, "sweep-w0", 0, oom_kills=0, peak_memory_bytes=limit, memory_limit_bytes=limit)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=1, exit_code=137)
    poll(fake)
    run = fresh(run)
    assert run.oom_kills == {} and run.state == RunState.RUNNING
    attempts = Attempt.objects.filter(task__run=run).order_by("attempt")
    assert [(a.attempt, a.oom_killed, a.evicted) for a in attempts] == [(0, False, True)]


def test_an_exit_137_whose_report_is_not_there_yet_is_decided_when_it_comes(launch, fake):
    run = launch()
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137)
    poll(fake)
    run = fresh(run)
    assert "sweep-w0-0" in run.reports_pending and run.oom_kills == {}
    assert not Attempt.objects.filter(task__run=run).exists()
    write_report(run, "sweep-w0", 0, oom_kills=1)
    poll(fake)
    run = fresh(run)
    assert run.oom_kills == {"sweep-w0": [0]} and run.reports_pending == {}
    attempt = Attempt.objects.get(task__run=run)
    assert attempt.oom_killed and not attempt.evicted


def test_an_exit_137_without_a_report_after_the_grace_is_an_eviction_that_says_so(
    launch, fake, settings
):
    settings.SIMRUN_REPORT_GRACE_S = 30.0
    run = launch()
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137)
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        poll(fake)
        traveller.shift(31)
        poll(fake)
    run = fresh(run)
    assert run.oom_kills == {} and run.reports_pending == {}
    attempt = Attempt.objects.get(task__run=run)
    assert attempt.evicted and not attempt.oom_killed
    assert attempt.message == "no report within 30 s: counted as a kill after the grace period"


def test_a_second_oom_kill_with_the_retry_memory_fails_the_run_naming_it(launch, fake):
    run = launch()
    retry_gb = plan(run).retry_memory_gb
    fake.set_nodes(run.workflow, {"sweep-w0": RETRYING_PHASE})
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    poll(fake)
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    assert fresh(run).state == RunState.RUNNING
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=1, exit_code=137, oom_killed=True)
    poll(fake)
    run = fresh(run)
    assert run.state == RunState.FAILED and run.oom_kills == {"sweep-w0": [0, 1]}
    assert f"killed for memory again with the retry memory {retry_gb:g} GiB" in run.message
    assert fake.called("stop") == [[run.workflow]]
    second = Attempt.objects.get(task__run=run, attempt=1)
    assert second.memory_gb == retry_gb


def test_the_message_names_the_retry_memory_also_when_the_backend_failed_the_node_itself(
    launch, fake
):
    run = launch()
    retry_gb = plan(run).retry_memory_gb
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=1, exit_code=137, oom_killed=True)
    fake.set_nodes(run.workflow, {"sweep-w0": "Failed"})
    fake.set_phase(run.workflow, "Failed", "No more retries left")
    poll(fake)
    run = fresh(run)
    assert run.state == RunState.FAILED
    assert run.message == (
        f"task sweep failed: sweep-w0 was killed for memory again with the retry memory "
        f"{retry_gb:g} GiB (attempts 0, 1)"
    )


def test_a_merge_or_an_unsplit_task_killed_twice_for_memory_fails_the_run(launch, fake):
    run = launch(PIPELINE)
    for attempt in (0, 1):
        fake.fail_attempt(run.workflow, "summary", attempt=attempt, exit_code=137, oom_killed=True)
    poll(fake)
    assert "summary was killed for memory again with the retry memory" in fresh(run).message
    run = launch()
    for attempt in (0, 1):
        fake.fail_attempt(run.workflow, "sweep-merge", attempt=attempt, oom_killed=True)
    poll(fake)
    assert "sweep-merge was killed for memory again" in fresh(run).message


def test_one_kill_for_memory_then_an_eviction_is_not_a_second_kill(launch, fake):
    run = launch()
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=1, exit_code=None, evicted=True)
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    run = fresh(run)
    assert run.state == RunState.RUNNING and run.oom_kills == {"sweep-w0": [0]}
    assert Attempt.objects.get(task__run=run, attempt=1).evicted


# A workflow that is gone (Ruling 23)


def test_a_gone_workflow_is_resolved_from_the_stored_states_and_the_merge_markers(launch, fake):
    fake.add_node("node-a")
    run = launch(
        {
            "reserve_node": True,
            "tasks": {
                "a": {"type": "squares", "settings": {"n": 2}},
                "b": {"type": "squares", "settings": {"n": 2}},
                "c": {"type": "squares", "settings": {"n": 2}},
            },
        }
    )
    fake.set_nodes(run.workflow, {"a-w0": "Succeeded", "a-merge": "Succeeded", "b-w0": "Running"})
    fake.set_nodes(run.workflow, {"c-w0": "Running"})
    poll(fake)
    assert states(run) == {"a": "done", "b": "running", "c": "running"}
    write_marker(run, "b")
    fake.vanish(run.workflow)
    poll(fake)
    run = fresh(run)
    assert states(run) == {"a": "done", "b": "done", "c": "failed"}
    assert run.state == RunState.FAILED and "the workflow is gone" in run.message
    assert "task c: undetermined" in run.message
    assert not run.pending_cancel and not run.pending_logs
    assert fake.called("stop") == [] and fake.called("cancel") == []
    assert fake.reserved_by("node-a") is None


def test_a_gone_workflow_keeps_its_reports_and_the_kill_observed_at_its_limit(launch, fake):
    run = launch()
    memory_gb = plan(run).memory_gb
    fake.set_nodes(run.workflow, {"sweep-w0": RETRYING_PHASE, "sweep-extra(0:1)": "Succeeded"})
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    write_report(run, "sweep-w1", 0, peak_memory_bytes=200 * 2**20)
    poll(fake)
    assert fresh(run).oom_kills == {"sweep-w0": [0]}
    fake.vanish(run.workflow)
    poll(fake)
    run = fresh(run)
    assert run.state == RunState.FAILED and not run.pending_logs
    observed = {(o.worker, o.attempt): o for o in Observation.objects.filter(run=run)}
    assert set(observed) == {("sweep-w0", 0), ("sweep-w1", 0)}
    kill = observed["sweep-w0", 0]
    assert kill.oom and not kill.from_report and kill.limit_bytes == int(memory_gb * 2**30)
    assert observed["sweep-w1", 0].peak_bytes == 200 * 2**20


def test_a_gone_workflow_whose_tasks_all_merged_succeeded(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    write_marker(run, "sweep")
    fake.vanish(run.workflow)
    poll(fake)
    assert fresh(run).state == RunState.SUCCEEDED and states(run) == {"sweep": "done"}


def test_a_gone_workflow_stays_open_while_a_merge_marker_is_awaited(merging, fake, settings):
    settings.SIMRUN_MERGE_MARKER_GRACE_S = 60
    fake.set_nodes(merging.workflow, {"sweep-w0": "Succeeded"})
    with time_machine.travel(2_000_000, tick=False):
        poll(fake)
        fake.vanish(merging.workflow)
        poll(fake)
    assert fresh(merging).state == RunState.RUNNING
    write_marker(merging, "sweep")
    with time_machine.travel(2_000_010, tick=False):
        poll(fake)
    assert fresh(merging).state == RunState.SUCCEEDED


def test_a_gone_workflow_whose_awaited_marker_never_came_fails_after_the_wait(
    merging, fake, settings
):
    settings.SIMRUN_MERGE_MARKER_GRACE_S = 60
    fake.set_nodes(merging.workflow, {"sweep-w0": "Succeeded"})
    with time_machine.travel(2_000_000, tick=False):
        poll(fake)
        fake.vanish(merging.workflow)
    with time_machine.travel(2_000_061, tick=False):
        poll(fake)
    run = fresh(merging)
    assert run.state == RunState.FAILED and "no out/.simrun-merged within 60 s" in run.message


# Observations (Ruling 24)


def finish_sweep(run, fake) -> None:
    fake.set_nodes(run.workflow, SWEEP_DONE)
    poll(fake)


def test_reports_are_recorded_as_observations_once_the_task_is_final_each_marked(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    write_report(run, "sweep-w0", 0, units_done=[0, 1, 2], peak_memory_bytes=5 * 2**20)
    write_report(run, "sweep-w1", 0, units_done=[3, 4, 5])
    poll(fake)
    assert Observation.objects.count() == 0, "not while the task runs"
    finish_sweep(run, fake)
    found = {o.worker: o for o in Observation.objects.all()}
    assert set(found) == {"sweep-w0", "sweep-w1"}
    first = found["sweep-w0"]
    assert (first.task_type, first.run_id, first.attempt, first.processes) == (
        "squares",
        run.id,
        0,
        2,
    )
    assert first.peak_bytes == 5 * 2**20 and first.units == 3 and first.cpu_seconds == 2.5
    assert not first.oom and first.from_report
    marks = sorted(p.name for p in (task_dir(run, "sweep") / "recorded").iterdir())
    assert marks == ["sweep-w0-0", "sweep-w1-0"]


def test_a_report_is_never_recorded_twice(launch, fake):
    run = launch()
    write_report(run, "sweep-w0", 0)
    finish_sweep(run, fake)
    Task.objects.filter(run=run).update(logs_kept=False)
    Run.objects.filter(pk=run.pk).update(pending_logs=True)
    write_report(run, "sweep-w2", 0)
    poll(fake)
    assert sorted(Observation.objects.values_list("worker", flat=True)) == ["sweep-w0", "sweep-w2"]


def test_a_report_marked_recorded_is_not_recorded_again_even_without_its_observation(launch, fake):
    run = launch()
    write_report(run, "sweep-w0", 0)
    marks = task_dir(run, "sweep") / "recorded"
    marks.mkdir(parents=True)
    (marks / "sweep-w0-0").touch()
    finish_sweep(run, fake)
    assert Observation.objects.count() == 0


@pytest.fixture
def report_reads(monkeypatch):
    """The bytes the controller read of each report, by name."""
    from runs.control import reports

    found: dict[str, int] = {}
    real = reports.untrusted.read_bytes

    def counted(base, relative, cap, **options):
        data = real(base, relative, cap, **options)
        name = relative[-1] if isinstance(relative, tuple) else str(relative).rsplit("/", 1)[-1]
        found[name] = found.get(name, 0) + len(data)
        return data

    monkeypatch.setattr(reports.untrusted, "read_bytes", counted)
    return found


def record_again(run, fake) -> None:
    """A later pass that records the task's reports once more (its logs owed again)."""
    Task.objects.filter(run=run).update(logs_kept=False)
    Run.objects.filter(pk=run.pk).update(pending_logs=True)
    poll(fake)


def test_a_runs_reports_another_process_records_now_are_left_owed_not_read_again(
    launch, fake, report_reads
):
    """The settle of a cancelled run and a pass met on it, and both read every report of its
    tasks, 3,000 planted ones twice: one process at a time records a run's reports."""
    from runs.control import locks, log_keeping

    run = launch()
    write_report(run, "sweep-w0", 0)
    planted = write_report(
        run, "sweep-w0", 100
    )  # no attempt of the service's: only a record reads it
    with locks.hold(log_keeping.recording_lock(run.id)) as held:  # another process's
        assert held
        finish_sweep(run, fake)
        assert planted.name not in report_reads
        assert fresh(run).pending_logs and not Observation.objects.exists()
    poll(fake)  # the next pass

    assert report_reads[planted.name] == planted.stat().st_size  # read once
    assert sorted(Observation.objects.values_list("attempt", flat=True)) == [0, 100]
    assert not fresh(run).pending_logs


def test_a_refused_report_is_read_once_and_marked(launch, fake, report_reads):
    run = launch()
    write_report(run, "sweep-w0", 0)
    write_report(run, "sweep-w1", 0).write_text('{"worker": "sweep-w1", "processes": -3}')
    finish_sweep(run, fake)
    record_again(run, fake)

    assert report_reads["sweep-w1-0.json"] == len('{"worker": "sweep-w1", "processes": -3}')
    assert [o.worker for o in Observation.objects.all()] == ["sweep-w0"]
    assert (task_dir(run, "sweep") / "recorded" / "sweep-w1-0.refused").exists()


def test_thousands_of_giant_reports_cost_one_bounded_read(launch, fake, report_reads, settings):
    settings.SIMRUN_REPORTS_READ_MB = 64
    run = launch()
    workers = task_dir(run, "sweep") / "workers"
    for i in range(200):  # forgeries: sparse reports of 16 MiB each, named before the real one
        workers.mkdir(parents=True, exist_ok=True)
        with (workers / f"sweep-w0-{100 + i}.json").open("wb") as handle:
            handle.truncate(16 * 2**20)
    write_report(run, "sweep-w0", 0)
    Attempt.objects.create(task=run.tasks.get(task_id="sweep"), worker="sweep-w0", attempt=0)
    finish_sweep(run, fake)
    first = sum(report_reads.values())
    record_again(run, fake)

    assert 0 < first <= (64 + 16) * 2**20
    assert sum(report_reads.values()) == first, "nothing is read twice"
    assert [o.worker for o in Observation.objects.all()] == ["sweep-w0"]


def test_a_report_of_an_attempt_killed_for_memory_is_an_oom_observation(launch, fake):
    run = launch()
    write_report(run, "sweep-w0", 0, oom_kills=0)
    write_report(run, "sweep-w0", 1)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    finish_sweep(run, fake)
    oom = dict(Observation.objects.values_list("attempt", "oom"))
    assert oom == {0: True, 1: False}


def test_a_kill_for_memory_without_a_report_is_observed_at_the_pods_limit(launch, fake):
    run = launch()
    sweep = plan(run)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=1, exit_code=137, oom_killed=True)
    poll(fake)
    assert fresh(run).state == RunState.FAILED
    observed = {o.attempt: o for o in Observation.objects.filter(worker="sweep-w0")}
    assert set(observed) == {0, 1}
    assert observed[0].limit_bytes == int(sweep.memory_gb * 2**30)
    assert observed[1].limit_bytes == int(sweep.retry_memory_gb * 2**30)
    for observation in observed.values():
        assert observation.oom and not observation.from_report and observation.peak_bytes is None
        assert observation.processes == sweep.processes
        assert observation.per_worker_gb == sweep.per_worker_gb
    assert (task_dir(run, "sweep") / "recorded" / "sweep-w0-1").exists()


def test_a_kill_polled_while_retrying_keeps_the_report_that_comes_later(launch, fake):
    """While the pod retries, the kill is observed at once at its limit (plan-shaped); the
    report of the killed attempt, written later, then gives the observation its peak, its
    processes and its count of OOM kills (Ruling 24 keeps the plan's shape only without one)."""
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": RETRYING_PHASE})
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    poll(fake)
    poll(fake)
    (early,) = Observation.objects.filter(run=run)
    assert early.oom and not early.from_report and early.peak_bytes is None
    write_report(run, "sweep-w0", 0, processes=1, peak_memory_bytes=900 * 2**20, oom_kills=3)
    write_report(run, "sweep-w0", 1, processes=2)
    finish_sweep(run, fake)
    assert fresh(run).state == RunState.SUCCEEDED
    killed = Observation.objects.get(run=run, worker="sweep-w0", attempt=0)
    assert killed.oom and killed.from_report
    assert (killed.peak_bytes, killed.processes, killed.oom_kills) == (900 * 2**20, 1, 3)
    assert killed.created_at == early.created_at, "it stays where the kill was seen"
    assert Observation.objects.filter(run=run, worker="sweep-w0").count() == 2


def test_a_unit_failure_at_import_leaves_no_observation_and_its_attempt_says_so(launch, fake):
    """A run whose units failed at ``import numpy`` measured 14 MiB of work it never did: the
    attempt keeps its peak, but it is no evidence of what the type needs."""
    run = launch()
    write_report(run, "sweep-w0", 0, failed=True, units_done=[], peak_memory_bytes=14 * 2**20)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=3)
    fake.set_nodes(run.workflow, {"sweep-w0": "Failed"})
    poll(fake)
    assert fresh(run).state == RunState.FAILED
    assert not Observation.objects.exists()
    attempt = Attempt.objects.get(task__run=run, worker="sweep-w0")
    assert attempt.peak_bytes == 14 * 2**20
    assert attempt.not_evidence == "not evidence of memory: it failed, not for memory"


def test_only_attempts_that_succeeded_or_were_killed_for_memory_are_evidence(launch, fake):
    """Of a workflow gone before its ends were seen: a worker whose report says it completed
    is evidence, one stopped before its work was done (a cancel, a store error) is not; of
    the ends seen, an exit 75 is not, an exit 0 is."""
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": RETRYING_PHASE, "sweep-extra(0:1)": "Running"})
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=75)
    write_report(run, "sweep-w0", 0, completed=False)
    poll(fake)
    write_report(run, "sweep-w0", 1, completed=True)
    write_report(run, "sweep-w1", 0, completed=False, units_done=[], peak_memory_bytes=2**20)
    write_report(run, "sweep-w2", 0, completed=True)
    fake.vanish(run.workflow)
    poll(fake)
    assert fresh(run).state == RunState.FAILED
    observed = set(Observation.objects.filter(run=run).values_list("worker", "attempt"))
    assert observed == {("sweep-w0", 1), ("sweep-w2", 0)}
    notes = dict(
        Attempt.objects.filter(task__run=run)
        .values_list("worker", "not_evidence")
        .filter(attempt=0)
    )
    assert notes["sweep-w0"] == "not evidence of memory: it exited 75"
    assert notes["sweep-w1"] == "not evidence of memory: it stopped before its work was done"
    assert notes["sweep-w2"] == ""


def test_a_report_whose_completed_is_not_a_boolean_is_refused(launch, fake):
    run = launch()
    write_report(run, "sweep-w0", 0, completed="yes")
    finish_sweep(run, fake)
    assert not Observation.objects.exists()


def test_the_report_of_simrun_exec_is_recorded_by_the_task_id_and_a_command_has_none(launch, fake):
    run = launch(PIPELINE)
    write_report(run, "summary", 0, processes=1)
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    fake.set_nodes(run.workflow, {"summary": "Succeeded", "plot": "Succeeded"})
    poll(fake)
    assert fresh(run).state == RunState.SUCCEEDED
    observed = Observation.objects.get()
    assert (observed.task_type, observed.worker, observed.task.task_id) == (
        "csv-stats",
        "summary",
        "summary",
    )


# Logs


def test_the_logs_of_a_final_tasks_terminated_pods_are_kept_in_the_store(launch, fake):
    run = launch(PIPELINE)
    fake.set_logs(
        run.workflow,
        "sweep",
        [pod_log("sweep-w0(0)", "first\n"), pod_log("sweep-w0(1)", "second\n", attempt=1)],
    )
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    fake.set_nodes(run.workflow, {"summary": "Running"})
    poll(fake)
    folder = task_dir(run, "sweep") / "logs"
    assert (folder / "sweep-w0-0.log").read_text() == "first\n"
    assert (folder / "sweep-w0-1.log").read_text() == "second\n"
    assert Task.objects.get(run=run, task_id="sweep").logs_kept
    calls = fake.called("logs").count([run.workflow, "sweep"])
    poll(fake)
    assert fake.called("logs").count([run.workflow, "sweep"]) == calls, "kept once"
    assert [run.workflow, "summary"] in fake.called("logs"), "a running task's ended pods"


def test_the_logs_of_pods_still_running_are_kept_once_they_terminated(launch, fake):
    run = launch(PIPELINE)
    fake.set_logs(
        run.workflow, "sweep", [pod_log("sweep-w0"), pod_log("sweep-extra(0:1)", done=False)]
    )
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    poll(fake)
    folder = task_dir(run, "sweep") / "logs"
    assert sorted(p.name for p in folder.iterdir()) == ["sweep-w0-0.log"]
    assert not Task.objects.get(run=run, task_id="sweep").logs_kept
    fake.set_logs(
        run.workflow, "sweep", [pod_log("sweep-w0"), pod_log("sweep-extra(0:1)", "bye\n")]
    )
    poll(fake)
    assert (folder / "sweep-extra(0:1)-0.log").read_text() == "bye\n"
    assert Task.objects.get(run=run, task_id="sweep").logs_kept


def test_the_ended_extra_workers_of_a_task_waiting_for_admission_have_their_logs_kept(launch, fake):
    run = launch(PIPELINE)
    fake.set_nodes(run.workflow, {"sweep-w0": "Pending", "sweep-extra(0:1)": "Succeeded"})
    fake.set_logs(
        run.workflow,
        "sweep",
        [pod_log("sweep-w0", done=False), pod_log("sweep-extra(0:1)", "extra done\n")],
    )
    poll(fake)
    assert Task.objects.get(run=run, task_id="sweep").state == TaskState.QUEUED
    folder = task_dir(run, "sweep") / "logs"
    assert (folder / "sweep-extra(0:1)-0.log").read_text() == "extra done\n"


def test_an_ended_run_stays_followed_until_its_logs_are_kept(launch, fake):
    run = launch()
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0", done=False)])
    finish_sweep(run, fake)
    run = fresh(run)
    assert run.state == RunState.SUCCEEDED and run.pending_logs and run.live
    assert Run.objects.live().filter(pk=run.pk).exists()
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0")])
    poll(fake)
    run = fresh(run)
    assert not run.pending_logs and not run.live
    statuses = len(fake.called("status"))
    poll(fake)
    assert len(fake.called("status")) == statuses, "an ended run is not read again"


def test_an_ended_run_whose_workflow_is_gone_has_no_logs_left_to_keep(launch, fake):
    run = launch()
    write_report(run, "sweep-w0", 0)
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0", done=False)])
    finish_sweep(run, fake)
    assert fresh(run).pending_logs
    fake.vanish(run.workflow)
    poll(fake)
    assert not fresh(run).pending_logs and not fresh(run).live
    assert Observation.objects.count() == 1


def test_the_logs_are_kept_before_the_workflow_is_stopped(launch, fake):
    run = launch()
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0")])
    finish_sweep(run, fake)
    ended = [name for name, _ in fake.calls if name in {"logs", "stop"}]
    assert ended == ["logs", "stop"]


# The terminal record first, then release and cancel, retried (Ruling 25)


def test_the_terminal_record_is_written_before_the_workflow_is_stopped(launch, fake):
    run = launch()
    seen = []

    def check(method: str) -> None:
        if method in {"stop", "unreserve", "logs"}:
            seen.append((method, Run.objects.get(pk=run.pk).state))

    fake.on_call = check
    finish_sweep(run, fake)
    assert seen and all(state == RunState.SUCCEEDED for _, state in seen)


def test_a_release_or_a_stop_that_fails_stays_pending_and_is_retried_alone(launch, fake):
    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True})
    fake.fail_next("stop")
    fake.fail_next("unreserve")
    finish_sweep(run, fake)
    run = fresh(run)
    assert run.state == RunState.SUCCEEDED
    assert run.pending_cancel and run.pending_release and run.live
    assert fake.reserved_by("node-a") == run.id
    statuses = len(fake.called("status"))
    poll(fake)
    run = fresh(run)
    assert not run.pending_cancel and not run.pending_release and not run.live
    assert fake.reserved_by("node-a") is None
    assert len(fake.called("status")) == statuses, "a terminal run's poll does nothing else"
    assert fake.called("stop") == [[run.workflow]] * 2


def test_an_unknown_node_counts_as_released_and_an_unknown_workflow_as_cancelled(launch, fake):
    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True})
    fake.fail_next("stop", "KeyError")
    fake.fail_next("unreserve", "KeyError")
    finish_sweep(run, fake)
    run = fresh(run)
    assert not run.pending_cancel and not run.pending_release


def test_a_node_is_released_only_from_the_reservation_of_its_run(launch, fake):
    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True})
    fake.reserve("node-a", "laterrun01")
    finish_sweep(run, fake)
    assert fake.called("unreserve") == [["node-a", run.id]]
    assert fake.reserved_by("node-a") == "laterrun01"
    assert not fresh(run).pending_release


# Progress


def test_units_done_follow_progress_jsonl_counting_each_unit_once(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    progress = task_dir(run, "sweep") / "progress.jsonl"
    lines = [f'{{"unit": {u}, "worker": "sweep-w0", "seconds": 0.1}}\n' for u in (0, 1, 1)]
    progress.write_text("".join(lines) + '{"unit": 2, "wor')
    poll(fake)
    task = Task.objects.get(run=run)
    assert task.units_done == 2 and task.progress_bytes == len("".join(lines))
    version = fresh(run).version
    poll(fake)
    assert fresh(run).version == version, "a file that did not grow is not read again"
    progress.write_text("".join(lines) + '{"unit": 2, "worker": "sweep-w1", "seconds": 0.1}\n')
    poll(fake)
    assert Task.objects.get(run=run).units_done == 3


def test_failed_units_are_counted_from_progress_to_the_task_end_with_the_first_why(launch, fake):
    """A unit that failed within the allowance counts into ``units_failed`` as it ends, those
    of the lines written just before the task's end too; the first one's why is kept."""
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    progress = task_dir(run, "sweep") / "progress.jsonl"
    failed = ', "failed": "unit {u} (T=0.5): ValueError: bad {u}"'
    lines = [
        f'{{"unit": {u}, "worker": "sweep-w0", "seconds": 0.1{failed.format(u=u) * (u % 2)}}}\n'
        for u in range(4)
    ]
    progress.write_text("".join(lines[:2]))
    poll(fake)
    task = Task.objects.get(run=run)
    assert (task.units_done, task.units_failed) == (2, 1)
    assert task.unit_failure == "unit 1 (T=0.5): ValueError: bad 1"
    with progress.open("a") as handle:
        handle.write("".join(lines[2:]))
    finish_sweep(run, fake)
    task = Task.objects.get(run=run)
    assert (task.state, task.units_failed) == (TaskState.DONE, 2)
    assert task.unit_failure == "unit 1 (T=0.5): ValueError: bad 1"


class CountedReads:
    """``untrusted.open_file`` as the controller calls it, with the bytes of each read kept."""

    def __init__(self, real):
        self.real, self.reads = real, []

    def __call__(self, base, relative):
        counted = self

        class File:
            def __init__(self, file):
                self.file = file

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.file.close()

            def read(self, size=-1):
                data = self.file.read(size)
                counted.reads.append(len(data))
                return data

            def __getattr__(self, name):
                return getattr(self.file, name)

        return File(self.real(base, relative))


@pytest.fixture
def progress_reads(monkeypatch):
    from runs.control import states as control_states

    counted = CountedReads(control_states.untrusted.open_file)
    monkeypatch.setattr(control_states.untrusted, "open_file", counted)
    return counted.reads


def progress_lines(units) -> str:
    return "".join(f'{{"unit": {u}, "worker": "sweep-w0", "seconds": 0.1}}\n' for u in units)


def test_progress_is_read_from_where_the_last_poll_stopped(launch, fake, progress_reads):
    run = launch({"tasks": {"sweep": {"type": "squares", "settings": {"n": 2000}}}})
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    progress = task_dir(run, "sweep") / "progress.jsonl"
    progress.write_text(progress_lines(range(1000)))
    poll(fake)
    first = sum(progress_reads)
    with progress.open("a") as handle:
        handle.write(progress_lines(range(1000, 1010)))
    poll(fake)

    assert first == progress.stat().st_size - len(progress_lines(range(1000, 1010)))
    assert sum(progress_reads) - first == len(progress_lines(range(1000, 1010)))
    task = Task.objects.get(run=run)
    assert task.units_done == 1010 and task.progress_bytes == progress.stat().st_size


def test_a_sparse_giant_progress_file_costs_a_bounded_read_a_poll(
    launch, fake, progress_reads, settings
):
    settings.SIMRUN_PROGRESS_READ_MB = 1
    run = launch({"tasks": {"sweep": {"type": "squares", "settings": {"n": 10**6}}}})
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    progress = task_dir(run, "sweep") / "progress.jsonl"
    with progress.open("wb") as handle:  # planted by a task: a gigabyte of nothing, then a line
        handle.write(progress_lines([7]).encode())
        handle.truncate(2**30)
    for _ in range(3):
        with progress.open("ab") as handle:  # it grows: each poll reads on
            handle.write(b"\0")
        poll(fake)

    assert progress_reads and max(progress_reads) <= 2**20
    task = Task.objects.get(run=run)
    assert task.units_done == 1
    assert task.progress_bytes == 2 * 2**20 + len(progress_lines([7]))  # the zeros passed over


# Cancel


def test_a_cancelled_run_is_written_first_then_its_workflow_cancelled_and_node_released(
    launch, fake, sent, django_capture_on_commit_callbacks
):
    from runs.control import cancelling, settling

    fake.add_node("node-a")
    run = launch({**PIPELINE, "reserve_node": True})
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    with django_capture_on_commit_callbacks(execute=True):
        cancelling.cancel(run.id)
    run = fresh(run)
    assert run.state == RunState.CANCELLED and run.ended_at is not None
    assert run.pending_cancel and run.pending_release and run.pending_logs
    assert states(run) == {"sweep": "skipped", "summary": "skipped", "plot": "skipped"}
    assert sent["runs.tasks.settle"] == [(run.id,)]
    assert fake.called("cancel") == []
    settling.settle(run.id, backend=fake)
    run = fresh(run)
    assert fake.called("cancel") == [[run.workflow]] and fake.called("stop") == []
    assert not run.pending_cancel and not run.pending_release
    assert fake.reserved_by("node-a") is None


def test_a_task_a_cancel_stops_while_it_runs_says_it_ran_and_keeps_its_units(launch, fake):
    """Skipped, as the spec's terminal record says, but not taken for one that never started."""
    from runs.control import cancelling

    run = launch(PIPELINE)
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    done = 3  # of 6
    progress = store.task_dir(run.id, "sweep") / "progress.jsonl"
    progress.write_text("".join(f'{{"unit": {i}}}\n' for i in range(done)))

    cancelling.cancel(run.id)

    sweep, summary = (fresh(run).tasks.get(task_id=t) for t in ("sweep", "summary"))
    assert sweep.state == "skipped" and summary.state == "skipped"
    assert sweep.message == "stopped while it ran: cancelled by the user"
    assert (sweep.stopped_by, summary.stopped_by) == ("cancelled", "")
    assert sweep.started_at is not None and sweep.units_done == done
    assert summary.message == "" and summary.started_at is None


def test_a_task_a_failed_run_stops_while_it_runs_is_marked_stopped(launch, fake):
    from runs.reads.shown import shown_state

    run = launch(
        {
            "tasks": {
                "a": {"type": "squares", "settings": {"n": 2}},
                "b": {"type": "squares", "settings": {"n": 2}},
            }
        }
    )
    fake.set_nodes(run.workflow, {"a-w0": "Running", "b-w0": "Running"})
    poll(fake)
    fake.set_nodes(run.workflow, {"a-w0": "Failed"})
    poll(fake)

    a, b = (fresh(run).tasks.get(task_id=t) for t in ("a", "b"))
    assert fresh(run).state == RunState.FAILED and (a.state, b.state) == ("failed", "skipped")
    assert (b.stopped_by, a.stopped_by) == ("failed", "")
    assert b.message.startswith("stopped while it ran: task a failed")
    assert shown_state(b.state, stopped_by=b.stopped_by) == "stopped: run failed"


def test_cancelling_an_unknown_run_is_not_found_and_an_ended_one_a_conflict(launch, fake):
    from runs.control import cancelling

    with pytest.raises(KeyError):
        cancelling.cancel("nosuchrun0")
    run = launch()
    finish_sweep(run, fake)
    with pytest.raises(ValueError, match="has ended"):
        cancelling.cancel(run.id)
    assert isinstance(Conflict("x"), ValueError)


def test_settling_a_run_deleted_meanwhile_is_ignored(launch, fake):
    from runs.control import settling

    run = launch()
    Run.objects.filter(pk=run.pk).delete()
    assert settling.settle(run.id, backend=fake) is False
    assert settling.settle_pending(run.id, backend=fake) == 0


def test_a_cancel_wins_over_a_reconcile_that_read_the_run_before(launch, fake):
    from runs.control import cancelling, polling

    run = launch()
    fake.set_nodes(run.workflow, SWEEP_DONE)
    read = fresh(run)
    tasks = list(read.tasks.all())
    cancelling.request_cancel(fresh(run))
    assert polling.reconcile_run(read, tasks, backend=fake) is False
    assert fresh(run).state == RunState.CANCELLED
    assert fake.called("stop") == []


def test_ended_runs_are_settled_by_the_settle_task_too(launch, fake):
    from runs.control import settling

    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True})
    fake.fail_next("unreserve")
    finish_sweep(run, fake)
    assert fresh(run).pending_release
    assert settling.settle_pending(backend=fake) == 1
    assert not fresh(run).pending_release
    assert timezone.now() >= fresh(run).ended_at


def test_a_log_the_store_has_already_is_left_as_it_is(launch, fake):
    """The local backend writes its logs live into the same files."""
    run = launch()
    live = task_dir(run, "sweep") / "logs" / "sweep-w0-0.log"
    live.parent.mkdir(parents=True)
    live.write_bytes(b"written live \xff\n")
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0(0)", "written live \ufffd\n")])
    finish_sweep(run, fake)
    assert live.read_bytes() == b"written live \xff\n"
    assert not fresh(run).pending_logs
