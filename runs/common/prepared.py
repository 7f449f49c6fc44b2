"""Statements PostgreSQL plans once per connection: the hottest ones, prepared by psycopg.

A statement that a connection has run ``prepare_threshold`` times (``DATABASES`` OPTIONS,
set from ``SIMRUN_PREPARED_STATEMENTS``) is prepared there; after five executions PostgreSQL
keeps a generic plan, unless it costs more than planning each time. The ORM's cursors bind
on the client and never prepare: only the statements run here do. So that a generic plan is
the plan of the values asked for, the values that steer it (a filter's) are written into
the text as literals, quoted by psycopg, and only those that do not (a time that a
duration runs to) stay parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

if TYPE_CHECKING:
    from django.db.backends.utils import _ExecuteParameters, _ExecuteQuery


def with_literals(connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> str:
    """``sql`` with ``params`` written in as quoted literals, its ``%`` doubled again: a
    part of a statement that is executed with parameters of its own."""
    return quoted(connection, sql, params).replace("%", "%%")


def quoted(connection: BaseDatabaseWrapper, sql: str, params: Any) -> str:
    """``sql`` with ``params`` written in, quoted by psycopg: PostgreSQL's ``compose_sql``,
    which Django's stubs do not name (their operations are the base's)."""
    return str(connection.ops.compose_sql(sql, params))  # type: ignore[attr-defined]


def prepared_rows(
    connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any]
) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` run on ``connection`` (PostgreSQL) through a preparing cursor.

    A request's first statement on a kept connection is its health check: instead of
    Django's ``SELECT 1`` before it, a round trip at every request, it runs at once and, if
    the connection turns out broken (the server restarted, say), runs again on a new one.
    A read can be run twice; inside a transaction Django's own check is kept.
    """
    db: Any = connection  # Django's stubs do not name the health check's attributes
    checking = (
        db.health_check_enabled
        and not db.health_check_done
        and db.connection is not None
        and not db.in_atomic_block
    )
    if checking:
        db.health_check_done = True
    try:
        return _rows(connection, sql, params)
    except DatabaseError:
        if not checking or not broken(connection):
            raise
    connection.close()
    return _rows(connection, sql, params)


def broken(connection: BaseDatabaseWrapper) -> bool:
    """Whether psycopg found the connection itself lost, not a statement of it failing."""
    raw = connection.connection
    return raw is None or bool(raw.closed or raw.broken)


def _rows(
    connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any]
) -> list[tuple[Any, ...]]:
    with preparing_cursor(connection) as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def preparing_cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor of ``connection`` (PostgreSQL) that binds parameters on the server, which
    lets psycopg prepare what it runs; wrapped as Django's own, so queries are counted and
    logged alike."""
    connection.validate_thread_sharing()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    # Django's stubs type the base cursor as its wrapper: psycopg's cursor is untyped there.
    cursor: Any = ServerBindingCursor(connection.connection)  # type: ignore[call-arg]
    if connection.queries_logged:
        return LoggedWithValues(cursor, connection)
    return connection.make_cursor(cursor)


class LoggedWithValues(CursorDebugWrapper):
    """Django's debug cursor, logging each statement with its values written in, as Django
    logs those bound on the server: psycopg keeps no text of a prepared statement's run."""

    def execute(self, sql: _ExecuteQuery, params: _ExecuteParameters = None) -> Any:
        with self.debug_sql(quoted(self.db, str(sql), params), params):
            return super(CursorDebugWrapper, self).execute(sql, params)
