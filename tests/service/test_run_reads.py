"""A run's reads for its page and API answer: the ORM's instances, from statements written once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Prefetch
from django.db.models.sql.compiler import SQLCompiler
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from harness.tasktypes import task_types
from runs.models import Attempt, Observation, Run, Task
from runs.planning.reruns import submit_rerun
from runs.planning.spec import validate_spec
from runs.planning.submission import create_run
from runs.reads import run_reads
from tests.factories import submitted

pytestmark = pytest.mark.django_db


def with_attempts(run: Run) -> Run:
    """``run`` with attempts out of order: two workers of the sweep, a retry, the summary's."""
    tasks = {t.task_id: t for t in run.tasks.all()}
    for task_id, worker, attempt in [
        ("sweep", "sweep-w1", 0),
        ("sweep", "sweep-w0", 1),
        ("summary", "summary", 0),
        ("sweep", "sweep-w0", 0),
    ]:
        Attempt.objects.create(
            task=tasks[task_id], worker=worker, attempt=attempt, phase="Running", memory_gb=1.5
        )
    return run


def orm_read(run_id: str) -> Run:
    """The same run read through the ORM's prefetching, as the views read it before."""
    attempts = Prefetch("attempts", Attempt.objects.order_by("worker", "attempt"))
    tasks = Prefetch("tasks", Task.objects.order_by("position").prefetch_related(attempts))
    return Run.objects.prefetch_related(tasks).get(pk=run_id)


def fields(row: object) -> dict[str, object]:
    return {f.attname: getattr(row, f.attname) for f in type(row)._meta.concrete_fields}  # type: ignore[attr-defined]


def compiled_models(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The models of the statements the ORM compiles from now on, as it compiles them."""
    compiled: list[str] = []
    as_sql = SQLCompiler.as_sql

    def counting(self: SQLCompiler, *args: object, **kwargs: object) -> object:
        compiled.append(self.query.model.__name__ if self.query.model else "")
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counting)
    return compiled


def test_a_runs_tasks_and_attempts_are_the_orms_instances_in_the_same_order(owner):
    run = with_attempts(submitted(owner))
    expected = orm_read(run.id)
    read = run_reads.with_tasks(Run.objects.get(pk=run.id))
    tasks = list(read.tasks.all())
    assert [fields(t) for t in tasks] == [fields(t) for t in expected.tasks.all()]
    for task, orm_task in zip(tasks, expected.tasks.all(), strict=True):
        assert [fields(a) for a in task.attempts.all()] == [
            fields(a) for a in orm_task.attempts.all()
        ]
    assert [a.worker for a in tasks[0].attempts.all()] == ["sweep-w0", "sweep-w0", "sweep-w1"]
    assert isinstance(tasks[0].settings, dict) and isinstance(tasks[0].plan, dict)


def test_a_runs_tasks_and_attempts_are_two_statements_and_then_none(owner):
    run = Run.objects.get(pk=with_attempts(submitted(owner)).id)
    with CaptureQueriesContext(connection) as reads:
        run_reads.with_tasks(run)
    assert len(reads) == 2
    with CaptureQueriesContext(connection) as later:
        for task in run.tasks.all():
            assert task.run is run
            for attempt in task.attempts.all():
                assert attempt.task is task
        assert run.tasks.count() == 2 and len(run.tasks.all()) == 2
    assert len(later) == 0


def test_a_related_queryset_still_filters_in_the_database(owner):
    run = run_reads.with_tasks(Run.objects.get(pk=with_attempts(submitted(owner)).id))
    assert list(run.tasks.filter(task_id="summary").values_list("task_id", flat=True)) == [
        "summary"
    ]


def test_the_reads_compile_no_statement_with_the_orm(owner, monkeypatch):
    run = Run.objects.get(pk=with_attempts(submitted(owner)).id)
    compiled = compiled_models(monkeypatch)
    run_reads.with_tasks(run)
    run_reads.observations(run)
    run_reads.rerun_ids(owner, run)
    assert compiled == []


def test_a_runs_observations_are_its_own_oldest_first(owner):
    run, other = submitted(owner), submitted(owner)
    now = timezone.now()
    for made, minutes in [(run, 2), (other, 3), (run, 5), (run, 1)]:
        Observation.objects.create(
            task_type="squares",
            run=made,
            task=made.tasks.get(task_id="sweep"),
            worker=f"w{minutes}",
            processes=1,
            per_worker_gb=1.0,
            peak_bytes=minutes,
            created_at=now - timedelta(minutes=minutes),
        )
    assert [o.worker for o in run_reads.observations(run)] == ["w5", "w2", "w1"]


def test_the_reruns_are_those_the_viewer_may_see_newest_first(owner, stranger, staff):
    source = submitted(owner)
    spec = validate_spec(source.spec, types=task_types())
    first = submit_rerun(source=source, spec=spec, actor=owner)
    theirs = create_run(
        spec=spec, owner=stranger, rerun_of=source
    )  # made before reruns were the owner's
    second = submit_rerun(source=source, spec=spec, actor=owner)
    Run.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert run_reads.rerun_ids(owner, source) == [second.id, first.id]
    assert run_reads.rerun_ids(stranger, source) == [theirs.id]
    assert run_reads.rerun_ids(staff, source) == [second.id, theirs.id, first.id]


@pytest.mark.parametrize(
    ("path", "runs"),
    # The page reads its run by one prepared statement (runs.reads.run_page): none compiled.
    [("/api/runs/{}/", 1), ("/runs/{}/", 0), ("/runs/{}/live/", 0)],
)
def test_a_runs_answer_and_page_compile_only_the_runs_own_statement(owner, path, runs, monkeypatch):
    run = with_attempts(submitted(owner))
    client = Client()
    client.force_login(owner)
    assert client.get(path.format(run.id)).status_code == 200  # sessions, caches: warmed
    compiled = compiled_models(monkeypatch)
    assert client.get(path.format(run.id)).status_code == 200
    assert compiled.count("Run") == runs
    assert not {"Task", "Attempt", "Observation"} & set(compiled)
