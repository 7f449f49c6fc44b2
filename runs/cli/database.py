"""The embedded database brought to the models, fast on a first start.

``migrate`` on an empty SQLite file renders the project's state after each of its ~50
migrations to apply them one by one: seconds of CPU on a first start, for tables the models
describe already. An empty SQLite database is instead made as the test runner makes one
without migrations: each model's table created from the model, every migration recorded as
applied, ``post_migrate`` sent (content types, permissions). That is the database ``migrate``
makes only while the models match their migrations (``makemigrations --check``) and no
migration does on an empty SQLite database what the models do not say (the data and
PostgreSQL-only steps of ours do nothing there); ``tests/cli/test_fresh_database.py``
compares the two databases, schema and rows. Any other database is migrated.
"""

from __future__ import annotations

from django.apps import apps
from django.core.management import call_command
from django.core.management.sql import emit_post_migrate_signal, emit_pre_migrate_signal
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder


def migrate(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Bring the database to the models: made at once when it is a new SQLite one."""
    if not create_fresh(alias):
        call_command("migrate", database=alias, interactive=False, verbosity=0)


def create_fresh(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """Make an empty SQLite database as ``migrate`` would leave it, in one transaction (a
    start stopped halfway leaves it empty); False, and nothing done, for any other."""
    connection = connections[alias]
    if connection.vendor != "sqlite" or connection.introspection.table_names():
        return False
    loader = MigrationLoader(connection)
    if loader.detect_conflicts():
        return False  # migrate says what to do
    emit_pre_migrate_signal(verbosity=0, interactive=False, db=alias)
    recorder = MigrationRecorder(connection)
    with connection.schema_editor() as editor:  # atomic: SQLite rolls DDL back
        for model in apps.get_models():
            if model._meta.managed and not model._meta.proxy and not model._meta.swapped:
                editor.create_model(model)
        recorder.ensure_schema()
        for key in loader.graph.nodes:
            migration = loader.graph.nodes[key]
            for replaced in migration.replaces:  # as the executor records a squash
                recorder.record_applied(*replaced)
            recorder.record_applied(*key)
        emit_post_migrate_signal(verbosity=0, interactive=False, db=alias)
    return True
