"""A user's name filter served by one index: the owner and the name's trigrams together.

PostgreSQL only. ``?name=`` of a user (every user's own list) met the owner's index and the
trigram index each in full and intersected the two bitmaps; the owner's alone was 5,000
entries for a user with 5,000 runs. A GIN index of ``owner_id`` (``btree_gin``) and the
trigrams of ``UPPER(name)`` finds the runs matching both at once, and as a multicolumn GIN
index it serves a name filter without an owner (staff) as the trigram index did, which it
replaces. Both ways it ends by analyzing the table: the planner reads how often a part of a
name matches from the statistics of the index's expression, which only ANALYZE gathers;
without them it guesses almost never, and answers a state and a name from the name's index
at several times the cost of walking the state's. On SQLite (the embedded default) it does
nothing.
"""

from typing import Any

from django.db import migrations

CREATE = [
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    "CREATE INDEX IF NOT EXISTS run_owner_name_trgm_idx ON runs_run "
    "USING gin (owner_id, UPPER(name) gin_trgm_ops)",
    "DROP INDEX IF EXISTS run_name_trgm_idx",
    "ANALYZE runs_run",
]
DROP = [
    "CREATE INDEX IF NOT EXISTS run_name_trgm_idx ON runs_run USING gin (UPPER(name) gin_trgm_ops)",
    "DROP INDEX IF EXISTS run_owner_name_trgm_idx",
    "ANALYZE runs_run",
]


def on_postgresql(statements: list[str]) -> Any:
    """A migration step running ``statements`` on PostgreSQL, nothing on another database.

    A copy of 0008's: a migration stands alone, as it was when applied."""

    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("runs", "0012_sessions_signed_in_by_the_user_backend")]

    operations = [migrations.RunPython(on_postgresql(CREATE), on_postgresql(DROP), elidable=False)]
