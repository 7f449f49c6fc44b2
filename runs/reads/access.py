"""Who may see what: a user sees their own runs (staff every run); anything else is a 404.

The API and every dashboard view, fragments included, fetch runs and tasks through these
helpers, so the check is never left to a template.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, IntegerField, OuterRef, QuerySet, Subquery, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404
from django.utils import timezone

from runs.models import Liveness, Observation, Run, RunQuerySet, Task
from runs.reads import run_reads, waiting

LIST_COLUMNS = (
    "id",
    "name",
    "state",
    "message",
    "backend",
    "pending_logs",
    "pending_release",
    "pending_cancel",
    "created_at",
    "submitted_at",
    "ended_at",
    "rerun_of_id",
)
"""The columns of a run a list shows (or needs for ``live`` and ``duration_s``)."""


@dataclass(frozen=True, slots=True)
class ListedRun(Liveness):
    """A run as a list shows it: its columns, its owner's name and its progress.

    A tuple of a page's row rather than a model instance: no JSON document decoded, no
    instance built, about a third of the time a model row costs.
    """

    id: str
    name: str
    state: str
    message: str
    backend: str
    pending_logs: bool
    pending_release: bool
    pending_cancel: bool
    created_at: datetime
    submitted_at: datetime | None
    ended_at: datetime | None
    rerun_of_id: str | None
    owner_name: str
    units_done_sum: int
    units_total_sum: int
    units_failed_sum: int

    @property
    def duration_s(self) -> float:
        return ((self.ended_at or timezone.now()) - self.created_at).total_seconds()


def visible_runs(user: Any) -> RunQuerySet:
    """The runs a user may see, with their owners."""
    return Run.objects.visible_to(user).select_related("owner")


def units_sum(column: str) -> RawSQL:
    """The sum of a column over the tasks of the run of the row: a correlated subquery.

    Written out rather than built from querysets: the same SQL as ``with_progress``, for a
    fraction of the time Django takes to build and compile nested querysets on each request.
    """
    tasks, runs = Task._meta.db_table, Run._meta.db_table
    sql = f'SELECT COALESCE(SUM("{column}"), 0) FROM "{tasks}" WHERE "run_id" = "{runs}"."id"'
    return RawSQL(sql, [], output_field=IntegerField())


LISTED_UNITS = {
    "units_done_sum": units_sum("units_done"),
    "units_total_sum": units_sum("units_total"),
    "units_failed_sum": units_sum("units_failed"),
}


def listed_rows(runs: RunQuerySet) -> Iterator[ListedRun]:
    """The runs as a list shows them, with their owner's name and progress: one query."""
    rows = runs.annotate(owner_name=F("owner__username"), **LISTED_UNITS).values_list(
        *LIST_COLUMNS, "owner_name", *LISTED_UNITS
    )
    return (ListedRun(*row) for row in rows)


def with_progress(runs: RunQuerySet) -> RunQuerySet:
    """Annotate ``units_done_sum``, ``units_total_sum`` and ``units_failed_sum`` over the
    tasks of each run.

    Correlated subqueries rather than a join and GROUP BY: evaluated only for the rows of a
    page, not for every run the filter matches.
    """

    def total(field: str) -> Coalesce:
        summed = (
            Task.objects.filter(run=OuterRef("pk"))
            .order_by()
            .values("run")
            .annotate(s=Sum(field))
            .values("s")
        )
        return Coalesce(Subquery(summed, output_field=IntegerField()), 0)

    return runs.annotate(
        units_done_sum=total("units_done"),
        units_total_sum=total("units_total"),
        units_failed_sum=total("units_failed"),
    )


def run_or_404(user: Any, run_id: str) -> Run:
    """A run the user may see; 404 for another user's run as for an unknown one."""
    return get_object_or_404(visible_runs(user), pk=run_id)


def with_tasks_for(user: Any, run: Run) -> Run:
    """A run the user may see, with its tasks in spec order and their attempts as ``user``
    sees them: two queries (a third when a task's message names the runs it waits behind, to
    name only the user's own)."""
    run = run_reads.with_tasks(run)
    waiting.hide_holders(user, run.tasks.all())
    return run


def task_or_404(user: Any, run_id: str, task_id: str) -> Task:
    """A task of a run the user may see, with its run and the run's owner."""
    tasks = Task.objects.select_related("run", "run__owner")
    if not user.is_staff:
        tasks = tasks.filter(run__owner=user)
    task = get_object_or_404(tasks, run_id=run_id, task_id=task_id)
    waiting.hide_holders(user, [task])
    return task


def visible_observations(user: Any) -> QuerySet[Observation]:
    """Observations of the user's runs (staff: all), newest first, with their tasks."""
    rows = Observation.objects.select_related("task").order_by("-created_at", "-id")
    return rows if user.is_staff else rows.filter(run__owner=user)
