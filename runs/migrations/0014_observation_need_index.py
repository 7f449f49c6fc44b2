"""The sizing prior's evidence read from an index: each key's top need, not every observation.

PostgreSQL only. At each submission the prior read the largest need per process (a kill's
limit, else the peak) of every key, clean and killed, by aggregating every observation: a
scan of the whole history, 0.7 s at a million observations and growing with it. An index
of the key, the kill and the need lets ``runs.planning.evidence`` step from key to key and read each
top need at the end of its range. On SQLite (the embedded default) it does nothing.
"""

from typing import Any

from django.db import migrations

CREATE = [
    "CREATE INDEX IF NOT EXISTS observation_need_idx ON runs_observation (task_type, oom, "
    "((CASE WHEN oom THEN limit_bytes ELSE peak_bytes END)::float8 / processes))",
]
DROP = ["DROP INDEX IF EXISTS observation_need_idx"]


def on_postgresql(statements: list[str]) -> Any:
    """A migration step running ``statements`` on PostgreSQL, nothing on another database.

    A copy of 0008's: a migration stands alone, as it was when applied."""

    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("runs", "0013_run_owner_name_trigram")]

    operations = [migrations.RunPython(on_postgresql(CREATE), on_postgresql(DROP), elidable=False)]
