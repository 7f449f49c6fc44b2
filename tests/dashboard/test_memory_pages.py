"""The memory loop on the pages: kill-driven plans, the memory each attempt really had."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from runs.models import Attempt, Observation
from runs.planning import sizing
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


def test_a_kill_drives_the_planned_figure_and_the_page_says_so(alice, owner):
    run = submitted(owner)
    Observation.objects.create(
        task_type="squares",
        run=run,
        worker="sweep-w0",
        processes=1,
        per_worker_gb=0.05,
        limit_bytes=int(0.4 * 2**30),
        oom=True,
        from_report=False,
        created_at=timezone.now(),
    )
    page = alice.get("/observations/?type=squares").content.decode()
    planned = re.search(r"<strong data-planned>([\d.]+) GiB</strong>", page)
    assert planned is not None, page
    assert float(planned[1]) >= 0.4 * sizing.BUMP
    assert f"kill × {sizing.BUMP:g}" in page
    assert re.search(r"<td data-limit>0\.4 GiB</td>", page), page


def test_a_run_page_shows_the_memory_each_attempt_ran_with_and_how_its_end_was_classed(
    alice, owner
):
    run = running(submitted(owner), sweep="running")
    task = run.tasks.get(task_id="sweep")
    Attempt.objects.create(
        task=task,
        worker="sweep-w0",
        attempt=0,
        exit_code=137,
        evicted=True,
        memory_gb=1.35,
        message="no report within 60 s: counted as a kill after the grace period",
    )
    page = alice.get(f"/runs/{run.id}/").content.decode()
    assert "1.35 GiB" in page
    assert "no report within 60 s: counted as a kill after the grace period" in page


def test_the_run_page_says_when_an_attempts_peak_is_no_evidence_of_memory(alice, owner):
    run = running(submitted(owner), sweep="failed")
    Attempt.objects.create(
        task=run.tasks.get(task_id="sweep"),
        worker="sweep-w0",
        attempt=0,
        exit_code=3,
        peak_bytes=14 * 2**20,
        not_evidence="not evidence of memory: it failed, not for memory",
    )
    page = alice.get(f"/runs/{run.id}/").content.decode()
    assert (
        '<span class="small muted" data-not-evidence>not evidence of memory: it failed, '
        "not for memory</span>"
    ) in page
    api = alice.get(f"/api/runs/{run.id}/").json()
    (sweep,) = [t for t in api["tasks"] if t["id"] == "sweep"]
    assert sweep["attempts"][0]["not_evidence"].endswith("it failed, not for memory")


def test_the_run_page_and_the_observations_page_show_gib_hours_used_and_wasted(alice, owner):
    run = running(submitted(owner), sweep="done")
    task = run.tasks.get(task_id="sweep")
    task.plan = {**task.plan, "counterfactual_gb": {"simrun": 1.0, "vpa": 3.0}}
    task.save(update_fields=["plan"])
    Observation.objects.create(
        task_type="squares",
        run=run,
        task=task,
        worker="sweep-w0",
        processes=1,
        per_worker_gb=1.0,
        peak_bytes=2**30,
        limit_bytes=2 * 2**30,
        seconds=1800,
    )
    page = alice.get(f"/runs/{run.id}/").content.decode()
    row = re.search(r'<tr data-usage-task="sweep">.*?</tr>', page, re.S)
    assert row is not None, page
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row[0], re.S)
    assert cells[2:6] == ["0.5 GiB·h", "0.5 GiB·h", "0 GiB·h", "0.5 GiB·h"]
    assert "1 GiB·h" in cells[-1]  # VPA's 3 GiB for the half hour: 2 GiB over the peak
    observed = alice.get("/observations/?type=squares").content.decode()
    assert "Memory use of squares by week" in observed
    assert re.search(r"Last 7 days: .*squares.* used 0\.5 GiB·h and wasted 0\.5 GiB·h", observed)


def test_a_type_the_sources_ship_has_its_observations_page_with_its_evidence(alice, owner):
    """A type only a run's sources define is no registered type; its observations are
    evidence all the same, so its page answers (it was a 404 while "Last 7 days" named it),
    lists it among the types, and plans from its peaks."""
    run = submitted(owner)
    for i in range(3):
        Observation.objects.create(
            task_type="shipped_relax",
            run=run,
            worker=f"sweep-w{i}",
            processes=1,
            per_worker_gb=0.5,
            peak_bytes=int(0.3 * 2**30),
            limit_bytes=2**30,
            seconds=600,
        )
    response = alice.get("/observations/?type=shipped_relax")
    assert response.status_code == 200
    page = response.content.decode()
    assert '<a href="?type=shipped_relax" class="active">shipped_relax' in page
    assert "3 earlier runs" in page or "from 3 observations of shipped_relax" in page
    assert page.count("<td data-limit>1 GiB</td>") == 3
    assert re.search(r"Last 7 days: .*shipped_relax", page)
    assert alice.get("/observations/?type=nothing_seen").status_code == 404


def _observed(run, task, seconds: float, peak_gib: float, limit_gib: float) -> None:
    Observation.objects.create(
        task_type="squares",
        run=run,
        task=task,
        worker="sweep-w0",
        processes=1,
        per_worker_gb=limit_gib,
        peak_bytes=int(peak_gib * 2**30),
        limit_bytes=int(limit_gib * 2**30),
        seconds=seconds,
    )


def test_memory_use_says_the_unit_its_figures_are_in_and_one_sentence_keeps_one(alice, owner):
    """A run of seconds reads in GiB·s: the caption says so, not GiB·h; the last week's
    sentence and the weekly table use one unit, where used (30 GiB·s) and wasted (0.025 GiB·h)
    of the same attempts were each given in its own."""
    run = running(submitted(owner), sweep="done")
    _observed(run, run.tasks.get(task_id="sweep"), seconds=10, peak_gib=0.5, limit_gib=2)
    page = alice.get(f"/runs/{run.id}/").content.decode()
    section = re.search(r'<section class="card" id="memory-use".*?</section>', page, re.S)
    assert section is not None, page
    assert "GiB·h" not in section[0]
    assert re.search(r'<span class="muted small">In GiB·s \(memory × time\)', section[0])

    other = running(submitted(owner), sweep="done")
    _observed(other, other.tasks.get(task_id="sweep"), seconds=50, peak_gib=0.5, limit_gib=2)
    observed = alice.get("/observations/?type=squares").content.decode()
    sentence = re.search(r"<p class=\"notice\" data-last-week>.*?</p>", observed, re.S)
    assert sentence is not None and "squares" in sentence[0]
    assert "used 0.0083 GiB·h and wasted 0.025 GiB·h" in sentence[0]
    assert "GiB·s" not in sentence[0], sentence[0]
    weeks = re.search(r"<section class=\"card\" data-usage-weeks>.*?</section>", observed, re.S)
    assert weeks is not None and "GiB·s" not in weeks[0]
    assert "In GiB·h (memory × time)" in weeks[0]


def test_maq_and_vpa_are_defined_where_they_appear(alice, owner):
    run = running(submitted(owner), sweep="done")
    task = run.tasks.get(task_id="sweep")
    task.plan = {**task.plan, "counterfactual_gb": {"simrun": 1.0, "vpa": 3.0}}
    task.save(update_fields=["plan"])
    _observed(run, task, seconds=1800, peak_gib=1, limit_gib=2)
    for page in (
        alice.get(f"/runs/{run.id}/").content.decode(),
        alice.get("/observations/?type=squares").content.decode(),
    ):
        for term, words in (
            ("MAQ", "memory allocation quality: used ÷ (used + wasted)"),
            ("VPA", "Kubernetes' Vertical Pod Autoscaler"),
        ):
            assert re.search(rf'<abbr title="[^"]*{re.escape(words)}[^"]*">{term}</abbr>', page)
