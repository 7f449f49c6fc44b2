"""The timeline of a run: bars where the record has times, nothing guessed where it has none."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.template.loader import render_to_string
from django.test import Client
from django.utils import timezone

from runs.models import Attempt, Reuse, Run, RunState, Task
from runs.web.timeline import LABEL_WIDTH, PLOT_WIDTH, TICKS, Tick, Timeline, timeline
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


def tasks_of(run: Run) -> list[Task]:
    return list(run.tasks.prefetch_related("attempts"))


def rows(run: Run, now) -> dict[str, object]:
    return {bar.label: bar for bar in timeline(run, tasks_of(run), now=now).bars}


def started(run: Run, seconds_in: float = 0, *, created_ago: float = 100) -> timezone.datetime:
    created = timezone.now() - timedelta(seconds=created_ago)
    Run.objects.filter(pk=run.pk).update(created_at=created)
    run.refresh_from_db()
    return created + timedelta(seconds=seconds_in)


def test_a_task_and_its_attempts_are_placed_on_the_runs_time_axis(owner):
    run = running(submitted(owner), sweep="running")
    begin = started(run, 25)
    now = run.created_at + timedelta(seconds=100)
    Task.objects.filter(run=run, task_id="sweep").update(started_at=begin)
    sweep = run.tasks.get(task_id="sweep")
    Attempt.objects.create(
        task=sweep, worker="sweep-w0", attempt=0, started_at=begin,
        ended_at=begin + timedelta(seconds=25), oom_killed=True, exit_code=137,
    )  # fmt: skip
    Attempt.objects.create(
        task=sweep, worker="sweep-w0", attempt=1, started_at=begin + timedelta(seconds=30)
    )
    bars = rows(run, now)
    task = bars["sweep"]
    assert task.x == pytest.approx(LABEL_WIDTH + 0.25 * PLOT_WIDTH)
    assert task.width == pytest.approx(0.75 * PLOT_WIDTH) and task.open_ended
    killed = bars["sweep-w0 #0"]
    assert killed.state == "oom" and not killed.open_ended
    assert killed.width == pytest.approx(0.25 * PLOT_WIDTH)
    retry = bars["sweep-w0 #1"]
    assert retry.state == "running" and retry.open_ended
    assert retry.x == pytest.approx(LABEL_WIDTH + 0.55 * PLOT_WIDTH)


def test_what_has_no_start_has_no_bar_and_an_attempts_start_stands_for_its_tasks(owner):
    run = running(submitted(owner), sweep="running")
    begin = started(run, 50)
    sweep = run.tasks.get(task_id="sweep")
    Attempt.objects.create(task=sweep, worker="sweep-w1", attempt=0, started_at=begin)
    Attempt.objects.create(task=sweep, worker="sweep-w0", attempt=0)  # no times yet
    result = timeline(run, tasks_of(run), now=run.created_at + timedelta(seconds=100))
    bars = {bar.label: bar for bar in result.bars}
    assert bars["sweep"].x == pytest.approx(LABEL_WIDTH + PLOT_WIDTH / 2)
    assert bars["sweep-w0 #0"].x is None and bars["summary"].x is None
    assert result.drawn == 2


def test_an_ended_run_ends_its_axis_and_the_ticks_count_from_its_creation(owner):
    run = submitted(owner)
    begin = started(run, 0, created_ago=600)
    Run.objects.filter(pk=run.pk).update(
        state=RunState.SUCCEEDED, ended_at=begin + timedelta(seconds=300)
    )
    Task.objects.filter(run=run).update(
        state="done",
        started_at=begin + timedelta(seconds=60),
        ended_at=begin + timedelta(seconds=300),
    )
    run.refresh_from_db()
    result = timeline(run, tasks_of(run))
    sweep = next(bar for bar in result.bars if bar.label == "sweep")
    assert sweep.x + sweep.width == pytest.approx(LABEL_WIDTH + PLOT_WIDTH)
    assert [t.label for t in result.ticks] == ["+0s", "+1m", "+2m", "+3m", "+4m", "+5m"]


@pytest.mark.parametrize("days", [7, 30, 400])
def test_a_run_live_for_weeks_has_as_few_ticks_as_a_short_one(owner, days):
    run = running(submitted(owner), sweep="running")
    created = run.created_at
    for phone in (False, True):
        ticks = timeline(run, tasks_of(run), now=created + timedelta(days=days), phone=phone).ticks
        assert 2 <= len(ticks) <= TICKS + 1
        assert ticks[0].label == "+0s"


@pytest.mark.parametrize("drawing", ["runs/_timeline.html", "runs/_dag.html"])
def test_the_drawings_numbers_are_plain_whatever_the_sites_number_format(drawing, settings):
    settings.USE_THOUSAND_SEPARATOR = True
    tick = Tick(x=1234.56, label="+1h")
    drawn = Timeline(bars=[], ticks=[tick], width=1500, height=1200)
    context = {"timeline": drawn, "dag": {"width": 1500, "height": 1200}}
    svg = render_to_string(drawing, context)
    assert 'width="1500"' in svg and 'height="1200"' in svg and "1,2" not in svg
    if drawing == "runs/_timeline.html":
        assert 'x="1234.6"' in svg


def test_the_run_page_draws_the_timeline_and_polls_it_while_live(owner):
    run = running(submitted(owner), sweep="running")
    Task.objects.filter(run=run, task_id="sweep").update(started_at=timezone.now())
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert '<svg class="timeline"' in page and 'data-drawn="1"' in page
    fragment = client.get(f"/runs/{run.id}/live/", HTTP_HX_REQUEST="true").content.decode()
    assert '<svg class="timeline"' in fragment and 'data-row="sweep"' in fragment


def test_a_task_that_started_with_reused_units_has_a_row_of_them_before_its_attempts(owner):
    source = submitted(owner)
    run = running(submitted(owner), sweep="running")
    begin = started(run, 40)
    Task.objects.filter(run=run, task_id="sweep").update(
        started_at=begin, reuse=Reuse.UNITS, reused_from=f"{source.id}/sweep", units_reused=3
    )
    sweep = run.tasks.get(task_id="sweep")
    Attempt.objects.create(task=sweep, worker="sweep-w0", attempt=0, started_at=begin)

    bars = timeline(run, tasks_of(run), now=run.created_at + timedelta(seconds=100)).bars

    of_sweep = [(bar.kind, bar.label) for bar in bars if bar.task_id == "sweep"]
    label = f"reused from {source.id}"
    assert of_sweep == [("task", "sweep"), ("reused", label), ("attempt", "sweep-w0 #0")]
    [reused] = [bar for bar in bars if bar.kind == "reused"]
    assert (
        reused.title
        == f"3 of {sweep.units_total} units reused from {source.id}: not computed by this run"
    )
    # From the run's creation to the task's start: no attempt of this run computed them.
    assert reused.x == pytest.approx(LABEL_WIDTH)
    assert reused.width == pytest.approx(0.4 * PLOT_WIDTH) and not reused.open_ended
    assert not [bar for bar in bars if bar.task_id == "summary" and bar.kind == "reused"]


def test_the_run_page_draws_the_row_of_reused_units(owner):
    source = submitted(owner)
    run = running(submitted(owner), sweep="running")
    started(run, 10)
    Task.objects.filter(run=run, task_id="sweep").update(
        reuse=Reuse.UNITS, reused_from=f"{source.id}/sweep", units_reused=3
    )
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert f'data-row="reused from {source.id}" data-kind="reused"' in page
