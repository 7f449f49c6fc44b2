"""A first start's database made at once (``runs.cli.database``) is the one ``migrate`` makes:
the same tables, columns, constraints and indexes, the same migrations recorded, the same
rows (content types, permissions). Each is made by a process of its own in an empty home."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
CONFIGURATION = ("SIMRUN_", "CELERY_", "DJANGO_", "DATABASE_URL", "SECRET_KEY", "DEBUG")
MAKE = {
    "migrate": "from django.core.management import call_command; "
    "call_command('migrate', interactive=False, verbosity=0)",
    "fresh": "from runs.cli.database import create_fresh; assert create_fresh()",
}


def made_by(how: str, home: Path) -> sqlite3.Connection:
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
    env |= {"SIMRUN_HOME": str(home), "SECRET_KEY": "test"}
    code = f"from runs.cli import home; home.prepare(); {MAKE[how]}"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    return sqlite3.connect(home / "simrun.sqlite3")


def definitions(sql: str) -> list[str]:
    """A CREATE TABLE's columns and constraints, in any order (a migration that added a
    column put it last), each with its spacing normalised."""
    body = sql[sql.index("(") + 1 : sql.rindex(")")]
    parts, depth, current = [], 0, ""
    for char in body:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return sorted(re.sub(r"\s+", " ", p).strip() for p in [*parts, current])


def schema(db: sqlite3.Connection) -> dict[str, object]:
    found: dict[str, object] = {}
    for kind, name, sql in db.execute("SELECT type, name, sql FROM sqlite_master"):
        if kind == "table":
            found[name] = definitions(sql)
        elif sql is not None:  # an index of ours (SQLite's own have none)
            found[name] = re.sub(r"\s+", " ", sql)
    return found


BY_NATURAL_KEY = {
    # The ids of content types follow the order models are listed in, which differs.
    "django_content_type": "SELECT app_label, model FROM django_content_type",
    "auth_permission": "SELECT codename, name, app_label, model FROM auth_permission p "
    "JOIN django_content_type t ON t.id = p.content_type_id",
    "django_migrations": "SELECT app, name FROM django_migrations",  # not when applied
    # A table a migration remade keeps a counter at 0, as good as none.
    "sqlite_sequence": "SELECT name, seq FROM sqlite_sequence WHERE seq > 0",
}


def rows(db: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    """Every table's rows, columns by name (or by natural key where ids may differ)."""
    found = {}
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        columns = sorted(row[1] for row in db.execute(f'PRAGMA table_info("{table}")'))
        listed = ", ".join(f'"{c}"' for c in columns)
        query = BY_NATURAL_KEY.get(table, f'SELECT {listed} FROM "{table}"')
        found[table] = sorted(db.execute(query), key=repr)
    return found


def test_a_fresh_database_is_the_one_migrate_makes(tmp_path):
    migrated = made_by("migrate", tmp_path / "migrated")
    fresh = made_by("fresh", tmp_path / "fresh")

    assert schema(fresh) == schema(migrated)
    assert rows(fresh) == rows(migrated)
    assert len(rows(fresh)["django_migrations"]) > 40
    assert len(rows(fresh)["auth_permission"]) > 40


def test_a_database_with_tables_is_left_to_migrate(tmp_path):
    made_by("fresh", tmp_path / "home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
    env |= {"SIMRUN_HOME": str(tmp_path / "home"), "SECRET_KEY": "test"}
    code = "from runs.cli import home; home.prepare(); from runs.cli.database import create_fresh"
    done = subprocess.run(
        [sys.executable, "-c", f"{code}; print(create_fresh())"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "False"
