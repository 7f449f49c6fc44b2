"""The run a run's page shows: the run with its owner, the name of who submitted it for its
owner, and its re-runs the viewer may see.

The page and its live part (polled every 2 s) read them at every request. On PostgreSQL they
are one statement, written here once and prepared, so planned once per connection
(``runs.common.prepared``): the ORM would build and compile the run's query at every request,
about as long as PostgreSQL takes to run it, and the re-runs and the submitter are a round
trip each. Elsewhere (the embedded SQLite) the ORM reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql import Query
from django.http import Http404

from runs.common.prepared import prepared_rows
from runs.common.user_backend import USER_COLUMNS, USER_FIELDS
from runs.models import Run
from runs.reads.access import run_or_404
from runs.reads.run_reads import rerun_ids

RUNS = Run._meta.db_table
RUN_FIELDS = Run._meta.concrete_fields
RUN_ATTNAMES = [field.attname for field in RUN_FIELDS]
USERS = get_user_model()._meta.db_table
USER_ID = get_user_model()._meta.pk.column
USER_NAME = next(
    field.column
    for field in get_user_model()._meta.concrete_fields
    if field.name == get_user_model().USERNAME_FIELD
)


def _run_sql(staff: bool) -> str:
    """The run by id with its owner, its submitter's name and its re-runs newest first; for
    a user who is not staff, only their own run and re-runs (``RunQuerySet.visible_to``)."""
    columns = ", ".join(f'"{RUNS}"."{field.column}"' for field in RUN_FIELDS)
    own = "" if staff else ' AND "rerun"."owner_id" = %s'
    reruns = (
        f'ARRAY(SELECT "rerun"."id" FROM "{RUNS}" AS "rerun" '
        f'WHERE "rerun"."rerun_of_id" = "{RUNS}"."id"{own} ORDER BY "rerun"."created_at" DESC)'
    )
    owned = "" if staff else f' AND "{RUNS}"."owner_id" = %s'
    return (
        f'SELECT {columns}, {USER_COLUMNS}, "submitter"."{USER_NAME}", {reruns} FROM "{RUNS}" '
        f'JOIN "{USERS}" ON "{USERS}"."{USER_ID}" = "{RUNS}"."owner_id" '
        f'LEFT JOIN "{USERS}" AS "submitter" '
        f'ON "submitter"."{USER_ID}" = "{RUNS}"."submitted_by_id" '
        f'WHERE "{RUNS}"."id" = %s{owned}'
    )


STAFF_SQL, OWN_SQL = _run_sql(staff=True), _run_sql(staff=False)


@dataclass(frozen=True, slots=True)
class PageRun:
    """A run as its page shows it: with its owner, who submitted it for them ("" for its
    owner) and the ids of its re-runs the viewer may see, newest first."""

    run: Run
    submitter: str
    reruns: tuple[str, ...]


def page_run_or_404(user: Any, run_id: str) -> PageRun:
    """The run ``user`` may see, as its page shows it; 404 for another user's run as for an
    unknown one."""
    connection = connections[router.db_for_read(Run)]
    if connection.vendor != "postgresql":
        return _read_by_orm(user, run_id)
    params = [run_id] if user.is_staff else [user.pk, run_id, user.pk]
    rows = prepared_rows(connection, STAFF_SQL if user.is_staff else OWN_SQL, params)
    if not rows:
        raise Http404("No Run matches the given query.")  # as get_object_or_404 says
    return _page_run(connection, rows[0])


def _page_run(connection: BaseDatabaseWrapper, row: tuple[Any, ...]) -> PageRun:
    """The run of a row of ``STAFF_SQL`` or ``OWN_SQL``, its values converted as the ORM
    converts them (its JSON decoded)."""
    fields = len(RUN_FIELDS)
    values = list(row[:fields])
    for position, (converters, expression) in _converters(connection.alias).items():
        for convert in converters:
            values[position] = convert(values[position], expression, connection)
    run = Run.from_db(connection.alias, RUN_ATTNAMES, values)
    owner_row = row[fields : fields + len(USER_FIELDS)]
    run.owner = get_user_model().from_db(connection.alias, USER_FIELDS, owner_row)
    submitter, reruns = row[-2], row[-1]
    return PageRun(run=run, submitter=submitter or "", reruns=tuple(reruns))


@cache
def _converters(alias: str) -> dict[int, tuple[list[Any], Any]]:
    """What the ORM applies to each column of a run read from the database ``alias``, by
    position: found once per process, not at every read."""
    connection = connections[alias]
    compiler = connection.ops.compiler("SQLCompiler")(Query(Run), connection, connection.alias)
    found: dict[int, tuple[list[Any], Any]] = compiler.get_converters(
        [field.get_col(RUNS) for field in RUN_FIELDS]
    )
    return found


def _read_by_orm(user: Any, run_id: str) -> PageRun:
    """``page_run_or_404`` through the ORM, in three or four statements."""
    run = run_or_404(user, run_id)
    submitter = run.submitted_by.get_username() if run.submitted_by else ""
    return PageRun(run=run, submitter=submitter, reruns=tuple(rerun_ids(user, run)))
