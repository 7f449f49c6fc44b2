"""The dashboard's sessions: Django's database sessions, read by a query written out in SQL.

Every page and every polled fragment reads its session first. On PostgreSQL the query is
written out (the ORM building it on each request cost three times what running it does) and
prepared, planned once per connection (``runs.common.prepared``). Elsewhere (the embedded SQLite)
the ORM reads it as Django's own store does.
"""

from __future__ import annotations

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.contrib.sessions.models import Session
from django.db import connections, router
from django.utils import timezone

from runs.common.prepared import prepared_rows


def _session_row() -> str:
    """The data and expiry of a session by its key, unless it has expired."""
    table = Session._meta.db_table
    return (
        f'SELECT "session_data", "expire_date" FROM "{table}" '
        'WHERE "session_key" = %s AND "expire_date" > %s'
    )


SESSION_ROW = _session_row()


class SessionStore(DatabaseSessionStore):
    """Django's database session store; on PostgreSQL its read is one written-out query."""

    def _get_session_from_db(self) -> Session | None:
        connection = connections[router.db_for_read(Session)]
        if connection.vendor != "postgresql":
            return super()._get_session_from_db()  # type: ignore[misc,no-any-return]
        key = self.session_key
        if key is not None:
            for data, expires in prepared_rows(connection, SESSION_ROW, [key, timezone.now()]):
                return Session(session_key=key, session_data=data, expire_date=expires)
        self._session_key = None  # as Django's store does: a new session gets a new key
        return None
