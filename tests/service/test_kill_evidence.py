"""A kill for memory is evidence for the next plan from the end of the killed attempt, not
only once its task is final (issue 26)."""

# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

import json

import pytest

from runs.backends.base import TaskPlan
from runs.control import log_keeping
from runs.models import Attempt, Observation, Run, RunState, Task
from tests.factories import running, submitted
from tests.service.controller_support import (  # noqa: F401
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
    write_report,
)

pytestmark = pytest.mark.django_db


class NoLogs:
    """A backend whose pods have no logs to keep (the live path asks for them)."""

    logs_in_store = False

    def keep_logs(self, workflow: str, task_id: str, folder):
        raise KeyError(task_id)


def test_a_kill_of_a_task_still_retrying_is_observed_at_once_and_once(owner):
    run = running(submitted(owner), sweep="retrying")
    Run.objects.filter(pk=run.pk).update(oom_kills={"sweep-w0": [0]})
    run.refresh_from_db()
    tasks = list(run.tasks.all())
    log_keeping.keep_logs(run, tasks, backend=NoLogs())  # type: ignore[arg-type]
    log_keeping.keep_logs(run, tasks, backend=NoLogs())  # type: ignore[arg-type]
    (kill,) = Observation.objects.filter(run_id=run.id)
    assert kill.oom and kill.worker == "sweep-w0" and kill.attempt == 0
    sweep = run.tasks.get(task_id="sweep")
    assert kill.limit_bytes == int(sweep.plan["memory_gb"] * 2**30)
    assert kill.task_type == sweep.type


REFUSED_REPORTS = {
    "not JSON": "{not json",
    "an insane figure": json.dumps({"worker": "sweep-w0", "processes": -3}),
    "a peak far above its limit": json.dumps(
        {"worker": "sweep-w0", "peak_memory_bytes": 64 * 2**40 - 1, "memory_limit_bytes": 2**30}
    ),
}


@pytest.mark.parametrize("text", REFUSED_REPORTS.values(), ids=REFUSED_REPORTS.keys())
def test_two_kills_in_one_poll_with_a_refused_report_are_each_observed_once(launch, fake, text):
    """A task killed twice for memory fails in the poll that sees both kills, so no live poll
    observed them first; the kill whose report is refused is observed at its limit, the one
    with a sound report from its report: each once, however often its reports are read."""
    run = launch()
    sweep = TaskPlan.model_validate(run.tasks.get(task_id="sweep").plan)
    write_report(run, "sweep-w0", 0).write_text(text)
    write_report(run, "sweep-w0", 1, oom_kills=1, peak_memory_bytes=2**30)
    for attempt in (0, 1):
        fake.fail_attempt(run.workflow, "sweep-w0", attempt=attempt, exit_code=137, oom_killed=True)
    poll(fake)
    assert fresh(run).state == RunState.FAILED
    Task.objects.filter(run=run).update(logs_kept=False)  # a later pass reads them again
    Run.objects.filter(pk=run.pk).update(pending_logs=True)
    poll(fake)

    observed = {o.attempt: o for o in Observation.objects.filter(run=run)}
    assert sorted(observed) == [0, 1]
    assert Observation.objects.filter(run=run).count() == 2
    at_limit, reported = observed[0], observed[1]
    assert at_limit.oom and not at_limit.from_report and at_limit.peak_bytes is None
    assert at_limit.limit_bytes == int(sweep.memory_gb * 2**30)
    assert reported.oom and reported.from_report and reported.peak_bytes == 2**30


def test_a_kill_whose_report_is_left_unread_over_the_budget_is_observed_at_its_limit(
    launch, fake, settings
):
    """The reports of a task are read up to SIMRUN_REPORTS_READ_MB: a kill whose report is
    past it is observed all the same, at the limit its attempt ran with."""
    settings.SIMRUN_REPORTS_READ_MB = 100 / 2**20  # the first report takes it all
    run = launch()
    write_report(run, "sweep-w0", 0, oom_kills=1)
    write_report(run, "sweep-w0", 1, oom_kills=1)
    for attempt in (0, 1):
        fake.fail_attempt(run.workflow, "sweep-w0", attempt=attempt, exit_code=137, oom_killed=True)
    poll(fake)

    observed = {o.attempt: o for o in Observation.objects.filter(run=run)}
    assert sorted(observed) == [0, 1]
    assert observed[0].from_report
    assert not observed[1].from_report
    row = Attempt.objects.get(task__run=run, worker="sweep-w0", attempt=1)
    assert observed[1].limit_bytes == int(row.memory_gb * 2**30)
