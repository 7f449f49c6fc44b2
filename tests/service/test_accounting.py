"""Memory use in GiB·h of runs, tasks and task types, beside what VPA would have allocated."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from runs.models import Observation, Run, Task
from runs.reads import accounting
from tests.factories import submitted

pytestmark = pytest.mark.django_db

GIB = 2**30


def observe(run: Run, task_id: str, *, peak: float | None, limit: float, seconds: float,
            oom: bool = False, days_ago: float = 0, worker: str = "w0") -> Observation:  # fmt: skip
    task = Task.objects.get(run=run, task_id=task_id)
    return Observation.objects.create(
        task_type=task.type,
        run=run,
        task=task,
        worker=worker,
        attempt=Observation.objects.filter(task=task, worker=worker).count(),
        processes=1,
        per_worker_gb=limit,
        peak_bytes=None if peak is None else int(peak * GIB),
        limit_bytes=int(limit * GIB),
        seconds=seconds,
        oom=oom,
        created_at=timezone.now() - timedelta(days=days_ago),
    )


def with_counterfactual(run: Run, task_id: str, **gb: float) -> None:
    task = Task.objects.get(run=run, task_id=task_id)
    task.plan = {**task.plan, "counterfactual_gb": gb}
    task.save(update_fields=["plan"])


def test_a_runs_use_is_peak_times_time_its_waste_the_limit_above_it_and_its_kills(owner):
    run = submitted(owner)
    with_counterfactual(run, "sweep", simrun=1.5, vpa=0.5)
    observe(run, "sweep", peak=None, limit=1.0, seconds=1800, oom=True)  # killed at 1 GiB
    observe(run, "sweep", peak=1.2, limit=2.0, seconds=3600)  # the retry
    observe(run, "summary", peak=0.25, limit=1.0, seconds=7200, worker="summary")
    usage = accounting.run_usage(run)
    sweep = usage.tasks["sweep"].wastage
    assert (sweep.used_gbh, sweep.over_gbh, sweep.under_gbh) == pytest.approx((1.2, 0.8, 0.5))
    total = usage.total.wastage
    assert total.used_gbh == pytest.approx(1.2 + 0.5)
    assert total.wasted_gbh == pytest.approx(0.8 + 0.5 + 1.5)
    assert total.maq == pytest.approx(1.7 / (1.7 + 2.8))
    assert usage.total.attempts == 3 and usage.total.kills == 1
    vpa = usage.tasks["sweep"].counterfactual["vpa"]
    # At VPA's 0.5 GiB the retry's 1.2 GiB peak is killed: 0.5 GiB for its hour.
    assert (vpa.over_gbh, vpa.under_gbh) == pytest.approx((0.0, 0.5))
    assert usage.tasks["sweep"].would_be_killed["vpa"] == 1
    simrun = usage.tasks["sweep"].counterfactual["simrun"]
    assert simrun.over_gbh == pytest.approx(0.3)
    assert usage.allocated["sweep"] == {
        "plan": Task.objects.get(run=run, task_id="sweep").plan["memory_gb"],
        "simrun": 1.5,
        "vpa": 0.5,
    }


def test_an_observation_whose_task_is_gone_counts_for_the_run_and_no_task(owner):
    run = submitted(owner)
    observe(run, "sweep", peak=1.0, limit=2.0, seconds=3600)
    observe(run, "summary", peak=0.5, limit=1.0, seconds=3600, worker="summary")
    Observation.objects.filter(task__task_id="summary").update(task=None)
    usage = accounting.run_usage(run)
    assert usage.total.attempts == 2
    assert usage.total.wastage.used_gbh == pytest.approx(1.5)
    assert usage.tasks["sweep"].attempts == 1 and usage.tasks["summary"].attempts == 0


def test_the_weekly_use_of_a_type_goes_newest_first_and_leaves_out_older_weeks(owner):
    run = submitted(owner)
    observe(run, "sweep", peak=0.5, limit=1.0, seconds=3600)
    observe(run, "sweep", peak=0.5, limit=1.0, seconds=3600, days_ago=14)
    observe(run, "sweep", peak=0.5, limit=1.0, seconds=3600, days_ago=400)
    weeks = accounting.weekly_usage(Observation.objects.all())
    assert [w.usage.attempts for w in weeks] == [1, 1]
    assert weeks[0].week > weeks[1].week
    assert weeks[0].usage.wastage.over_gbh == pytest.approx(0.5)


def test_the_api_shows_a_runs_use_and_the_weekly_use_of_the_users_types(owner, stranger):
    mine, theirs = submitted(owner), submitted(stranger)
    observe(mine, "sweep", peak=0.5, limit=1.0, seconds=3600)
    observe(theirs, "sweep", peak=0.1, limit=1.0, seconds=3600)
    client = APIClient()
    client.force_authenticate(owner)
    usage = client.get(f"/api/runs/{mine.id}/").json()["usage"]
    assert usage["used_gbh"] == 0.5 and usage["over_gbh"] == 0.5 and usage["maq"] == 0.5
    assert usage["tasks"]["sweep"]["attempts"] == 1
    weeks = client.get("/api/usage/", {"task_type": "squares"}).json()["results"]
    assert [(w["task_type"], w["attempts"], w["used_gbh"]) for w in weeks] == [("squares", 1, 0.5)]
    answer = client.get("/api/usage/", {"weeks": "lots"})
    assert answer.status_code == 400 and "weeks" in answer.json()
