"""/metrics: what Prometheus scrapes after a run, and who may scrape it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from runs import tasks
from runs.control import submitting
from runs.models import Attempt, Observation, Run, RunState
from tests.factories import submitted

pytestmark = pytest.mark.django_db


def scrape(client: Client, **headers: str) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_a_scrape_after_a_run_finds_its_counters(operator, owner, backend):
    before = scrape(operator)
    run = submitted(owner)
    submitting.submit(run.id, backend=backend)
    run.refresh_from_db()
    backend.finish(run.workflow, "Succeeded")
    tasks.reconcile()
    assert Run.objects.get(pk=run.pk).state == RunState.SUCCEEDED
    sweep = run.tasks.get(task_id="sweep")
    Attempt.objects.create(task=sweep, worker="sweep-w9", attempt=0, oom_killed=True)
    Attempt.objects.create(task=sweep, worker="sweep-w9", attempt=1, evicted=True)
    Observation.objects.create(
        task_type="squares", run=run, task=sweep, worker="sweep-w0", processes=2,
        per_worker_gb=1.0, peak_bytes=2 * 1024**3, limit_bytes=3 * 1024**3, unit_seconds=7200,
    )  # fmt: skip
    after = scrape(operator)
    assert after[("simrun_runs", (("state", "succeeded"),))] == 1
    assert after[("simrun_runs", (("state", "running"),))] == 0
    assert after[("simrun_tasks", (("state", "done"),))] == 2
    assert after[("simrun_runs_submitted_total", ())] == 1
    assert after[("simrun_submission_latency_seconds_count", ())] == 1
    assert after[("simrun_submission_latency_seconds_bucket", (("le", "+Inf"),))] == 1
    assert after[("simrun_oom_kills_total", ())] == 1
    assert after[("simrun_evictions_total", ())] == 1
    assert after[("simrun_retries_total", ())] == 1
    assert after[("simrun_queue_depth", (("what", "runs"),))] == 0
    # 2 GiB at the peak for 7200 s of units over 2 processes: 2 GiB·h used, 1 GiB·h left over.
    assert after[("simrun_memory_gib_hours", (("what", "used"),))] == pytest.approx(2.0)
    assert after[("simrun_memory_gib_hours", (("what", "wasted"),))] == pytest.approx(1.0)
    passes = ("simrun_reconcile_seconds_count", ())
    assert after[passes] >= before.get(passes, 0) + 1
    changed = ("simrun_reconcile_runs_changed_total", ())
    assert after[changed] >= before.get(changed, 0) + 1


def test_metrics_need_staff_or_the_bearer_token(client, owner, settings):
    settings.SIMRUN_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 403
    alice = Client()
    alice.force_login(owner)
    assert alice.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert "simrun_runs" in str(scrape(client, HTTP_AUTHORIZATION="Bearer scrape-secret"))


def test_without_a_token_a_scrape_from_this_machine_passes_only_when_allowed(client, settings):
    settings.SIMRUN_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    settings.SIMRUN_METRICS_LOOPBACK = True
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.7").status_code == 403


def test_the_grafana_dashboard_asks_only_for_metrics_the_service_exposes(operator):
    dashboard = json.loads((Path(__file__).parents[2] / "docker/grafana-simrun.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    asked = {name for expr in exprs for name in re.findall(r"simrun_\w+", expr)}
    exposed = {name for name, _ in scrape(operator)}
    assert asked and asked <= exposed, asked - exposed
