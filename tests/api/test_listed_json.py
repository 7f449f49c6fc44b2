"""The runs list's rows as PostgreSQL writes them: the representation DRF would build, exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers

from runs.api.serializers import RunSerializer
from runs.models import Run, RunState, Task
from runs.reads.access import with_progress
from runs.reads.capped_pages import page_of
from runs.reads.listed_json import SettledTexts, built_json, listed_page, writes_json
from runs.reads.listing import Listing

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def settled_texts(monkeypatch) -> SettledTexts:
    """An empty cache of settled runs' texts for each test."""
    texts = SettledTexts(100)
    monkeypatch.setattr("runs.reads.listed_json.SETTLED", texts)
    return texts


NOW = datetime(2026, 12, 1, 12, 0, 0, 250000, tzinfo=UTC)


def awkward_runs(owner) -> list[Run]:
    """Runs whose fields test the writing: nulls, whole seconds, quotes, newlines, unicode."""
    made = []
    cases = [
        # name, state, message, submitted_at, ended_at, pending_logs
        ("plain", RunState.RUNNING, "", NOW - timedelta(minutes=3, microseconds=7), None, False),
        ('quo"te\\back', RunState.FAILED, "line one\nline\ttwo", None, NOW, False),
        ("ünïcødé ✓", RunState.SUCCEEDED, "done", NOW.replace(microsecond=0), NOW, True),
        ("", RunState.SUBMITTING, "</script>", None, None, False),
        ("cancelled", RunState.CANCELLED, "by you", NOW, NOW + timedelta(days=3), False),
    ]
    for i, (name, state, message, submitted_at, ended_at, pending_logs) in enumerate(cases):
        run = Run.objects.create(owner=owner, name=name, spec={"tasks": {}}, backend="fake")
        created_at = (NOW - timedelta(hours=i + 1)).replace(microsecond=0 if i % 2 else 123456)
        Run.objects.filter(pk=run.pk).update(
            state=state,
            message=message,
            submitted_at=submitted_at,
            ended_at=ended_at,
            pending_logs=pending_logs,
            created_at=created_at,
            rerun_of=made[-1] if made else None,
        )
        for position in range(i):  # 0 to 4 tasks: the first run's sums are of no task
            Task.objects.create(
                run=run,
                task_id=f"t{position}",
                kind="command",
                plan={"cores": 1, "memory_gb": 1},
                position=position,
                units_total=10 + position,
                units_done=position,
            )
        made.append(run)
    return made


def drf_representation(run: Run) -> dict:
    """What DRF's own field machinery makes of a run with its progress."""
    return dict(serializers.ModelSerializer.to_representation(RunSerializer(run), run))


def test_postgresql_writes_each_run_as_drf_represents_it(owner, time_machine):
    time_machine.move_to(NOW, tick=False)
    awkward_runs(owner)
    listing = Listing.of(owner, {})
    runs = listing.runs()
    assert writes_json(runs.db)  # the tests' database is PostgreSQL: the SQL is what is tested
    written = [json.loads(text) for text in listed_page(listing, 1, 50, now=timezone.now()).rows]
    expected = [drf_representation(run) for run in with_progress(runs.select_related("owner"))]
    assert written == expected
    assert [run["name"] for run in written][:3] == ["plain", 'quo"te\\back', "ünïcødé ✓"]
    assert written[0]["duration_s"] == pytest.approx(3600 + 0.250000 - 0.123456, abs=1e-6)
    assert written[1]["created_at"] == "2026-12-01T10:00:00Z"  # no fraction for whole seconds
    assert written[2]["live"] is True and written[2]["units_total"] == 10 + 11


def test_the_python_writing_for_other_databases_is_the_same(owner, time_machine):
    time_machine.move_to(NOW, tick=False)
    awkward_runs(owner)
    listing = Listing.of(owner, {})
    in_python = [json.loads(text) for text in built_json(listing.runs())]
    in_postgresql = [
        json.loads(text) for text in listed_page(listing, 1, 50, now=timezone.now()).rows
    ]
    assert in_python == in_postgresql


def test_the_api_list_is_the_same_page_in_json_and_in_the_browsable_api(owner, owner_client):
    awkward_runs(owner)
    as_json = owner_client.get("/api/runs/?page_size=2&page=2")
    assert as_json["Content-Type"] == "application/json"
    page = as_json.json()
    assert page["count"] == 5 and page["count_exact"] is True
    assert page["next"] == "http://testserver/api/runs/?page=3&page_size=2"
    assert [run["name"] for run in page["results"]] == ["ünïcødé ✓", ""]
    browsable = owner_client.get("/api/runs/?page_size=2&page=2", HTTP_ACCEPT="text/html")
    assert browsable["Content-Type"].startswith("text/html")
    assert "ünïcødé ✓" in browsable.content.decode()


@pytest.mark.parametrize("by_name", [False, True])
@pytest.mark.parametrize(
    ("number", "size"), [(1, 2), (2, 2), (3, 2), (1, 5), (1, 9), (4, 1), (2, 4), (3, 4)]
)
def test_a_page_in_one_statement_is_the_page_and_the_count_page_of_gives(
    owner, stranger, number, size, by_name, monkeypatch, django_assert_num_queries
):
    """The cap at 3, below the 5 runs: pages before, across and after it, full and short;
    the runs matched found once for both (by name) or each walking the list's index."""
    monkeypatch.setattr("runs.reads.capped_pages.COUNT_CAP", 3)
    monkeypatch.setattr("runs.reads.listed_json.COUNT_CAP", 3)
    awkward_runs(owner)
    Run.objects.create(owner=stranger, name="not alice's", spec={}, backend="fake")
    listing = Listing.of(owner, {})
    now = timezone.now()
    expected = page_of(listing.runs(), number, size, read=built_json)
    first = listed_page(listing, number, size, now=now, by_name=by_name)  # writes settled texts
    with django_assert_num_queries(1):  # a page seen before: one statement
        again = listed_page(listing, number, size, now=now, by_name=by_name)
    for page in (first, again):
        assert [json.loads(row) | {"duration_s": 0} for row in page.rows] == [
            json.loads(row) | {"duration_s": 0} for row in expected.rows
        ]
        assert (page.has_next, page.count, page.count_exact) == (
            expected.has_next,
            expected.count,
            expected.count_exact,
        )


def listed(owner) -> dict[str, dict]:
    """The owner's first page as the API lists it, by run id."""
    page = listed_page(Listing.of(owner, {}), 1, 50, now=timezone.now())
    return {run["id"]: run for run in map(json.loads, page.rows)}


def settled_run(owner, **fields) -> Run:
    run = Run.objects.create(owner=owner, name="settled", spec={"tasks": {}}, backend="fake")
    Run.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, ended_at=NOW, **fields)
    Task.objects.create(
        run=run, task_id="t", kind="command", plan={}, position=0, units_total=4, units_done=4
    )
    return run


def test_a_settled_run_is_written_once_and_then_read_from_the_process(
    owner, settled_texts, django_assert_num_queries
):
    run = settled_run(owner)
    with django_assert_num_queries(2):  # the page, then the text of the run not yet kept
        first = listed(owner)
    assert len(settled_texts) == 1
    with django_assert_num_queries(1):
        assert listed(owner) == first
    assert first[run.id]["live"] is False and first[run.id]["units_done"] == 4


def test_a_settled_run_changed_in_any_way_is_written_again(owner, django_assert_num_queries):
    """Each update of its row, even two in one transaction (a test is one), its owner's new
    name and its tasks' new sums are seen at the next list."""
    run = settled_run(owner, message="first")
    assert listed(owner)[run.id]["message"] == "first"
    Run.objects.filter(pk=run.pk).update(message="second")
    assert listed(owner)[run.id]["message"] == "second"
    Run.objects.filter(pk=run.pk).update(message="third")
    assert listed(owner)[run.id]["message"] == "third"
    owner.username = "renamed"
    owner.save()
    assert listed(owner)[run.id]["owner"] == "renamed"
    Task.objects.filter(run=run).update(units_total=9)
    assert (listed(owner)[run.id]["units_done"], listed(owner)[run.id]["units_total"]) == (4, 9)
    Run.objects.filter(pk=run.pk).update(pending_logs=True)  # live again: not from the cache
    assert listed(owner)[run.id]["live"] is True


def test_a_live_run_is_written_in_the_page_statement_each_time(
    owner, settled_texts, time_machine, django_assert_num_queries
):
    time_machine.move_to(NOW, tick=False)
    run = Run.objects.create(owner=owner, name="live", spec={"tasks": {}}, backend="fake")
    with django_assert_num_queries(1):
        assert listed(owner)[run.id]["live"] is True
    before = listed(owner)[run.id]["duration_s"]
    time_machine.move_to(NOW + timedelta(seconds=30), tick=False)
    assert listed(owner)[run.id]["duration_s"] == pytest.approx(before + 30)
    assert len(settled_texts) == 0


def test_the_settled_texts_kept_are_bounded_and_the_least_recently_used_go_first():
    texts = SettledTexts(2)
    texts.put(("a", "1", "alice", [1, 1]), "A")
    texts.put(("b", "1", "alice", [1, 1]), "B")
    assert texts.get(("a", "1", "alice", [1, 1])) == "A"  # now b is the least recently used
    texts.put(("c", "1", "alice", [1, 1]), "C")
    assert len(texts) == 2
    assert texts.get(("b", "1", "alice", [1, 1])) is None
    assert texts.get(("a", "1", "alice", [1, 1])) == "A"
    assert texts.get(("a", "2", "alice", [1, 1])) is None  # another version of a
