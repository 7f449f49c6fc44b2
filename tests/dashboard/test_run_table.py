"""The runs table's rows: an ended run's row is written once per process and kept by its
JSON text, a live run's is written at every table (``runs.web.run_table``)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone

from runs.models import Run, RunState
from runs.web import run_table

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def kept(monkeypatch) -> run_table.EndedRows:
    """A store of ended rows of this test's own."""
    rows = run_table.EndedRows(run_table.ROWS_KEPT)
    monkeypatch.setattr(run_table, "ENDED", rows)
    return rows


@pytest.fixture
def written(monkeypatch) -> list[str]:
    """The runs whose row was written, by id, in order."""
    ids: list[str] = []
    write = run_table.table_row

    def counted(run, *args):
        ids.append(run["id"])
        return write(run, *args)

    monkeypatch.setattr(run_table, "table_row", counted)
    return ids


def table(client: Client) -> str:
    response = client.get("/runs/table/", **HTMX)
    assert response.status_code in (200, 286)
    return response.content.decode()


def shown(body: str) -> dict[str, str]:
    """Each row of the table by its run's id."""
    found = re.findall(r'(<tr data-run="([^"]+)">.*?</tr>)', body, re.S)
    return {run_id: row for row, run_id in found}


def ended_run(owner, name: str, state: str = RunState.SUCCEEDED) -> Run:
    return Run.objects.create(
        owner=owner, name=name, spec={}, backend="fake", state=state, ended_at=timezone.now()
    )


def test_an_ended_runs_row_is_written_once_and_the_same_after(alice, owner, written):
    run = ended_run(owner, "done")
    first = shown(table(alice))
    again = shown(table(alice))
    assert written == [run.id]
    assert again == first and "done" in first[run.id]


def test_a_live_runs_row_is_written_at_every_table_and_not_kept(alice, owner, kept, written):
    run = Run.objects.create(
        owner=owner,
        name="going",
        spec={},
        backend="fake",
        state=RunState.RUNNING,
        created_at=timezone.now() - timedelta(minutes=5),
    )
    for _ in range(3):
        assert "going" in shown(table(alice))[run.id]
    assert written == [run.id] * 3
    assert len(kept) == 0


def test_an_ended_run_changed_shows_its_change(alice, owner):
    run = ended_run(owner, "before", RunState.FAILED)
    assert "before" in shown(table(alice))[run.id]
    Run.objects.filter(pk=run.pk).update(name="after")
    row = shown(table(alice))[run.id]
    assert "after" in row and "before" not in row


def test_a_kept_row_is_the_row_written_anew(owner, kept):
    run = ended_run(owner, "<b>x</b>", RunState.CANCELLED)
    text = json.dumps(
        {
            "id": run.id,
            "name": run.name,
            "owner": owner.username,
            "state": run.state,
            "units_done": 3,
            "units_total": 7,
            "duration_s": 61.5,
            "created_at": "2026-12-01T10:00:00Z",
        }
    )
    zone = ZoneInfo("Europe/Paris")
    fresh, live = run_table.table_rows([text], zone, "/runs/")
    kept_row, _ = run_table.table_rows([text], zone, "/runs/")
    assert kept_row == fresh and not live and len(kept) == 1
    assert "&lt;b&gt;x&lt;/b&gt;" in fresh and "2026-12-01 11:00" in fresh
    # Another zone is another row: the time is written in the zone asked for.
    utc, _ = run_table.table_rows([text], ZoneInfo("UTC"), "/runs/")
    assert "2026-12-01 10:00" in utc and len(kept) == 2


def test_the_rows_kept_are_bounded_the_least_recently_used_going_first():
    rows = run_table.EndedRows(2)
    zone = ZoneInfo("UTC")
    for text in ["a", "b"]:
        rows.put((text, zone, "/"), f"row {text}")
    assert rows.get(("a", zone, "/")) == "row a"  # a is now the most recently used
    rows.put(("c", zone, "/"), "row c")
    assert rows.get(("b", zone, "/")) is None
    assert rows.get(("a", zone, "/")) == "row a" and rows.get(("c", zone, "/")) == "row c"
    assert len(rows) == 2
