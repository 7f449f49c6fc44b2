"""A sweep whose units failed within their allowance says so everywhere its progress shows:
the API's run and task (``units_failed``, ``unit_failure``), the runs list of the API and of
the page, the run's page and ``simrun show``; never a plain 11/11."""

from __future__ import annotations

import pytest
from django.test import Client

from runs.models import Task
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db

WHY = "unit 4 (T=0.5, seed=1): ValueError: bad"


def sweep_with_failures(owner):
    run = ended(submitted(owner))
    Task.objects.filter(run=run, task_id="sweep").update(units_failed=3, unit_failure=WHY)
    return run


def test_the_api_the_lists_the_page_and_show_count_the_failed_units(
    owner, owner_client, simrun, backend
):
    run = sweep_with_failures(owner)

    detail = owner_client.get(f"/api/runs/{run.id}/").json()
    assert detail["units_failed"] == 3
    task = next(t for t in detail["tasks"] if t["id"] == "sweep")
    assert (task["units_failed"], task["unit_failure"]) == (3, WHY)
    listed = owner_client.get("/api/runs/").json()["results"]
    assert next(r for r in listed if r["id"] == run.id)["units_failed"] == 3

    page = Client()
    page.force_login(owner)
    assert 'data-units-failed="3"' in page.get("/").content.decode()
    html = page.get(f"/runs/{run.id}/").content.decode()
    assert f"3 of 20 units of sweep failed (allowed by failures.allowed); the first: {WHY}" in html

    shown = simrun("show", run.id)
    assert shown.code == 0, shown.err
    assert "units (3 failed)" in shown.out
    assert f"sweep: 3 of 20 units failed; the first: {WHY}" in shown.out
    row = next(line for line in shown.out.splitlines() if line.startswith("sweep "))
    assert "(3 failed)" in row
