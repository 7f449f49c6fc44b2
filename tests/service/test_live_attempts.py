"""An attempt row from the moment its pod runs: node, phase, start, then its end and peak."""
# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from runs.backends.base import TaskPlan
from runs.common import store
from runs.control import observations, settling
from runs.models import Attempt, Run, Task, TaskState
from runs.reads.live_attempts import live_figures
from tests.service.controller_support import (  # noqa: F401
    SWEEP,
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
    task_dir,
    write_report,
)

pytestmark = pytest.mark.django_db

STARTED = 1_790_000_000.0


def rows(run: Run) -> dict[tuple[str, int], Attempt]:
    return {(a.worker, a.attempt): a for a in Attempt.objects.filter(task__run=run)}


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def test_a_running_worker_has_its_attempt_row_with_node_start_and_memory_at_once(launch, fake):
    run = launch()
    with fake.state() as state:
        state.workflows[run.workflow].hosts["sweep-extra(0:1)"] = "node-b"
        state.workflows[run.workflow].started["sweep-extra(0:1)"] = STARTED
    fake.set_nodes(run.workflow, {"sweep-w0": "Pending", "sweep-extra(0:1)": "Running"})
    poll(fake)
    found = rows(run)
    assert list(found) == [("sweep-w1", 0)]
    row = found[("sweep-w1", 0)]
    assert (row.phase, row.node_name, row.started_at, row.ended_at) == (
        "Running",
        "node-b",
        at(STARTED),
        None,
    )
    assert (
        row.exit_code is None
        and row.memory_gb == TaskPlan.model_validate(Task.objects.get(run=run).plan).memory_gb
    )
    assert fresh(run).attempts_seen == {"sweep-w1": "0 Running"}


def test_an_attempt_seen_running_again_is_not_written_again(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    version = fresh(run).version
    assert poll(fake) == 0
    assert fresh(run).version == version and len(rows(run)) == 1


def test_a_retry_that_runs_gets_a_row_of_its_own_and_the_failed_one_keeps_its_start(launch, fake):
    run = launch()
    with fake.state() as state:
        state.workflows[run.workflow].started["sweep-w0"] = STARTED
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    fake.fail_attempt(run.workflow, "sweep-w0", attempt=0, exit_code=143, evicted=True)
    with fake.state() as state:
        state.workflows[run.workflow].failed["sweep-w0"][0].ended_at = STARTED + 30
        state.workflows[run.workflow].started["sweep-w0"] = STARTED + 40
    poll(fake)
    found = rows(run)
    evicted, retry = found[("sweep-w0", 0)], found[("sweep-w0", 1)]
    assert (evicted.phase, evicted.evicted, evicted.started_at, evicted.ended_at) == (
        "Failed",
        True,
        at(STARTED),
        at(STARTED + 30),
    )
    assert (retry.phase, retry.started_at) == ("Running", at(STARTED + 40))


def test_a_worker_that_succeeds_while_its_task_runs_ends_as_its_report_says(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running", "sweep-extra(0:1)": "Running"})
    poll(fake)
    write_report(run, "sweep-w1", started=STARTED, prepare_seconds=2.0, seconds=5.0)
    fake.set_nodes(run.workflow, {"sweep-extra(0:1)": "Succeeded"})
    poll(fake)
    row = rows(run)[("sweep-w1", 0)]
    assert (row.phase, row.exit_code, row.ended_at) == ("Succeeded", 0, at(STARTED + 7))
    assert row.memory_gb == 1.0  # the report's limit
    assert rows(run)[("sweep-w0", 0)].phase == "Running"


def test_a_running_attempt_shows_its_live_samples_and_peak_so_far(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    with fake.state() as state:
        state.workflows[run.workflow].started["sweep-w0"] = STARTED
    poll(fake)
    live = task_dir(run, "sweep") / "live" / "sweep-w0-0.json"
    live.parent.mkdir(parents=True)
    samples = [[STARTED + 1, 100 << 20], [STARTED + 2, 300 << 20], [STARTED + 3, 200 << 20]]
    live.write_text(json.dumps({"samples": samples, "peak_bytes": 300 << 20, "updated": 1.0}))
    attempt = Attempt.objects.select_related("task__run").get(task__run=run)
    figures = live_figures(attempt, now=at(STARTED + 10))
    assert figures.running and figures.phase == "Running"
    assert figures.duration_s == 10 and figures.peak_bytes == 300 << 20
    assert figures.samples == [tuple(s) for s in samples]
    points = figures.sparkline(limit_gb=1.0).split()
    assert len(points) == 3 and points[0].startswith("0.0,") and points[-1].startswith("120.0,")


def test_a_live_file_that_is_no_regular_file_is_not_read(launch, fake, tmp_path):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    folder = task_dir(run, "sweep") / "live"
    folder.mkdir(parents=True)
    (folder / "sweep-w0-0.json").symlink_to("/dev/zero")
    attempt = Attempt.objects.select_related("task__run").get(task__run=run)
    figures = live_figures(attempt)
    assert figures.running and figures.samples == [] and figures.peak_bytes is None


def test_an_attempt_recorded_running_whose_task_ended_is_shown_stopped(launch, fake):
    run = launch()
    with fake.state() as state:
        state.workflows[run.workflow].started["sweep-w0"] = STARTED
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    Task.objects.filter(run=run).update(state=TaskState.FAILED, ended_at=at(STARTED + 5))
    attempt = Attempt.objects.select_related("task__run").get(task__run=run)
    figures = live_figures(attempt, now=at(STARTED + 60))
    assert not figures.running and figures.phase == "Stopped" and figures.duration_s == 5


def test_recording_a_final_task_gives_its_attempts_their_measured_peaks(launch, fake):
    run = launch({"name": "", "tasks": {"hi": {"command": ["echo", "hi"]}}})
    fake.set_nodes(run.workflow, {"hi": "Running"})
    poll(fake)
    write_report(run, "hi", peak_memory_bytes=123 << 20)
    fake.set_nodes(run.workflow, {"hi": "Succeeded"})
    poll(fake)
    task = Task.objects.select_related("run").get(run=run)
    plan = TaskPlan.model_validate(task.plan)
    # A command task of a run without a name has no observations, yet its peak is kept.
    folder = store.task_folder(run.id, "hi")
    assert observations.record(task=task, plan=plan, folder=folder, kills={}) == 0
    assert rows(run)[("hi", 0)].peak_bytes == 123 << 20


def test_the_controller_keeps_the_peak_of_a_done_tasks_attempts(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    write_report(run, "sweep-w0", peak_memory_bytes=456 << 20)
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    poll(fake)
    settling.settle_pending(backend=fake)
    assert rows(run)[("sweep-w0", 0)].peak_bytes == 456 << 20
