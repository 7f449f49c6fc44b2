"""Figures as a person reads them, the same in the CLI and on the page: memory to the
hundredth, one rounding of durations, sizes that are never "0 KiB", "1 core", a kill for
memory and its retry told while following a run."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rich.console import Console

from runs.backends.local.admission import Demand, Held, shortage
from runs.cli.progress import follow
from runs.client.progress import size_text
from runs.models import Run, RunState, Task
from runs.templatetags.simrun import gbh, gbh_unit
from tests.cli.test_progress import ScriptedClient
from tests.factories import submitted

pytestmark = pytest.mark.django_db


def test_show_prints_memory_to_the_hundredth_and_the_pages_duration(simrun, owner):
    run = submitted(owner)
    Task.objects.filter(run=run, task_id="sweep").update(
        plan={**run.tasks.get(task_id="sweep").plan, "memory_gb": 23.540084838867188}
    )
    ended = timezone.now()
    Run.objects.filter(pk=run.pk).update(
        state=RunState.SUCCEEDED, created_at=ended - timedelta(seconds=32.6), ended_at=ended
    )
    shown = simrun("show", run.id)
    assert shown.code == 0, shown.err
    assert "23.54 GiB" in shown.out and "23.540084" not in shown.out
    assert "· 32s" in shown.out  # as the page says, not 33 s
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert "took 32s" in page


def test_sizes_below_a_kib_are_in_bytes():
    assert size_text(300) == "300 B"
    assert size_text(3 * 1024 + 400) == "3.4 KiB"
    assert size_text(5 * 2**20) == "5.0 MiB"


def test_one_core_is_singular():
    held = [Held("other", 2, 1.0)]
    assert shortage(Demand("r1", "t", 1, 0.5), held, 2, 8.0).startswith("waits for 1 core;")
    assert shortage(Demand("r1", "t", 2, 0.5), held, 2, 8.0).startswith("waits for 2 cores;")


def test_a_column_of_memory_time_keeps_one_unit():
    unit = gbh_unit(0.005, 0.002)
    assert unit == "s"
    assert gbh(0.005, unit) == "18 GiB·s" and gbh(0.5, unit) == "1.8e+03 GiB·s"
    unit = gbh_unit(0.2, 0.5)
    assert gbh(0.001, unit).endswith("GiB·h") and gbh(0.5, unit) == "0.5 GiB·h"


def test_follow_says_when_an_attempt_is_killed_for_memory_and_retried():
    def polled(state: str, attempts: list[dict]) -> dict:
        task = {"id": "sweep", "state": "running", "units_done": 1, "units_total": 4}
        task |= {"plan": {"memory_gb": 1.0, "retry_memory_gb": 2.5}, "attempts": attempts}
        return {"state": state, "message": "", "duration_s": 9, "tasks": [task]}

    killed = {"worker": "sweep-w0", "attempt": 0, "oom_killed": True, "memory_gb": 1.0}
    retry = {"worker": "sweep-w0", "attempt": 1, "oom_killed": False, "memory_gb": 2.5}
    out = io.StringIO()
    client = ScriptedClient(
        polled("running", []),
        polled("running", [killed]),
        polled("running", [killed, retry]),
        polled("succeeded", [killed, retry]),
    )
    assert follow(client, "r1", Console(file=out, width=120), sleep=lambda s: None) == 0
    lines = [line for line in out.getvalue().splitlines() if "killed for memory" in line]
    assert lines == ["sweep-w0 attempt 0 was killed for memory at 1 GiB; retried with 2.5 GiB"]
