"""Who is signed in: Django's model backend, its user read by a written-out query.

Every dashboard page and polled fragment reads the user of its session. On PostgreSQL the
query is written out, as the session's is (``runs.common.sessions``): the ORM building it on each
request cost more than running it; and prepared, planned once per connection
(``runs.common.prepared``). Elsewhere (the embedded SQLite) the ORM reads it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.db import connections, router

from runs.common.prepared import prepared_rows


def _user_columns() -> tuple[str, list[str]]:
    """Every column of a user, named with its table (a query may join another), and the
    names of the fields they hold, in order: what ``Model.from_db`` makes a user of."""
    meta = get_user_model()._meta
    fields = meta.concrete_fields
    columns = ", ".join(f'"{meta.db_table}"."{field.column}"' for field in fields)
    return columns, [field.attname for field in fields]


USER_COLUMNS, USER_FIELDS = _user_columns()


def _user_row() -> str:
    """The query of a user by id."""
    meta = get_user_model()._meta
    return f'SELECT {USER_COLUMNS} FROM "{meta.db_table}" WHERE "{meta.pk.column}" = %s'


USER_ROW = _user_row()


class UserBackend(ModelBackend):
    """Django's model backend; on PostgreSQL a session's user is one written-out query."""

    def get_user(self, user_id: Any) -> User | None:
        users = get_user_model()
        connection = connections[router.db_for_read(users)]
        if connection.vendor != "postgresql":
            return super().get_user(user_id)
        for row in prepared_rows(connection, USER_ROW, [user_id]):
            user = users.from_db(connection.alias, USER_FIELDS, row)
            return user if self.user_can_authenticate(user) else None
        return None
