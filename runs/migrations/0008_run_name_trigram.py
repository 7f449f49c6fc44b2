"""The runs list's name filter (``name__icontains``) served by a trigram index.

PostgreSQL only: ``pg_trgm`` and a GIN index on ``UPPER(name)``, the expression Django's
``icontains`` compares, so ``?name=`` reads the index instead of every run. On SQLite (the
embedded default) it does nothing: a list there is one user's, small enough to scan.
"""

from typing import Any

from django.db import migrations

CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS run_name_trgm_idx ON runs_run USING gin (UPPER(name) gin_trgm_ops)",
]
DROP = ["DROP INDEX IF EXISTS run_name_trgm_idx"]


def on_postgresql(statements: list[str]) -> Any:
    """A migration step running ``statements`` on PostgreSQL, nothing on another database."""

    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("runs", "0007_observation_seconds")]

    operations = [migrations.RunPython(on_postgresql(CREATE), on_postgresql(DROP), elidable=False)]
