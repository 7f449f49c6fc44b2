"""The run page's attempt rows: a running worker with its start, ticking duration, peak so far
beside its limit and its memory sparkline; an ended one with its measured peak."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from runs.models import Task
from tests.api.live_attempts import with_live_attempts
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


def row(page: str, name: str) -> str:
    match = re.search(rf'<tr data-attempt="{name}".*?</tr>', page, re.S)
    assert match, f"no row of {name}"
    return match.group(0)


def test_a_running_attempt_has_a_live_row_with_its_sparkline(owner, store):
    client = Client()
    client.force_login(owner)
    run = running(submitted(owner), sweep="running")
    with_live_attempts(run)

    page = client.get(f"/runs/{run.id}/live/", HTTP_HX_REQUEST="true").content.decode()

    live = row(page, "sweep-w1-0")
    assert "data-running" in live and "badge state-running" in live and "node-b" in live
    ticking = re.search(r'data-col="duration" data-ticking="([\d.]+)">1m 0[5-9]s<', live)
    assert ticking and 65 <= float(ticking.group(1)) < 70
    assert "<span data-peak>0.59 GiB</span>" in live and "/ 1.5 GiB" in live
    points = re.search(r'<polyline points="([^"]+)"', live)
    assert points and len(points.group(1).split()) == 3
    ended = row(page, "sweep-w0-0")
    assert "data-running" not in ended and "data-ticking" not in ended and "<polyline" not in ended
    assert "1m 30s" in ended and "<span data-peak>0.68 GiB</span>" in ended


def test_a_started_task_shows_when_it_started_and_for_how_long_it_runs(owner, store):
    client = Client()
    client.force_login(owner)
    run = running(submitted(owner), sweep="running")
    started = timezone.now() - timedelta(seconds=75)
    Task.objects.filter(run=run, task_id="sweep").update(started_at=started)

    page = client.get(f"/runs/{run.id}/").content.decode()

    card = page[page.index('id="task-sweep"') : page.index('id="task-summary"')]
    shown = re.search(r"<span [^>]*data-task-time[^>]*>(.*?)</span></span>", card, re.S)
    assert shown, card[:400]
    assert f"started {started:%H:%M:%S} · running for" in shown.group(1)
    assert re.search(r'data-ticking="7[5-9]\.\d+">1m 1[5-9]s', shown.group(1))
    assert "data-task-time" not in page[page.index('id="task-summary"') :]
