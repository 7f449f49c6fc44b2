"""Every filter combination of the runs list is answered from indexes at a realistic size.

On PostgreSQL with 100,000 runs of 20 users (analyzed as the bench database is), each query
the API's list and the dashboard's table make on ``runs_run`` is explained: none may read
the whole table (a ``Seq Scan``), whichever filters are combined, for staff and for a user.
"""

from __future__ import annotations

import importlib
from itertools import combinations
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from runs.models import Run

NAME_INDEX = importlib.import_module("runs.migrations.0013_run_owner_name_trigram")

RUNS = 100_000
USERS = 20
FILTERS = {
    "state": "failed",
    "owner": "user1",
    "name": "sweep-9",
    "created_after": "2026-01-01",
    "created_before": "2026-06-01",
    "live": "true",
}
OTHER_VALUES = {"state": "succeeded", "name": "4242", "live": "false"}
"""A second value of some filters: a common state, a rare name, the ended runs."""


def seed_runs(users: list[User]) -> None:
    """``RUNS`` runs copied from one made by the ORM: states and owners spread as in use."""
    template = Run.objects.create(owner=users[0], name="template", spec={}, backend="fake")
    columns = [f.column for f in Run._meta.concrete_fields]
    chosen = {
        "id": "'r' || lpad(i::text, 9, '0')",
        "name": "'sweep-' || i",
        "owner_id": f"(ARRAY{[u.pk for u in users]})[1 + i %% {USERS}]",
        "state": "CASE WHEN i %% 50 = 0 THEN 'running' WHEN i %% 8 = 0 THEN 'failed' "
        "ELSE 'succeeded' END",
        "created_at": "timestamptz '2025-01-01' + i * interval '5 minutes'",
        "submitted_at": "timestamptz '2025-01-01' + i * interval '5 minutes'",
        "ended_at": "CASE WHEN i %% 50 = 0 THEN NULL "
        "ELSE timestamptz '2025-01-01' + i * interval '5 minutes' + interval '3 minutes' END",
    }
    select = ", ".join(chosen.get(c, f'"{c}"') for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO runs_run ({', '.join(columns)}) SELECT {select} "
            f"FROM generate_series(1, {RUNS}) AS i, runs_run WHERE runs_run.id = %s",
            [template.pk],
        )
        cursor.execute("ANALYZE runs_run")


def seeded_users() -> list[User]:
    """``USERS`` users, the first of them staff, and ``RUNS`` runs spread over them."""
    if connection.vendor != "postgresql":
        pytest.skip("plans are PostgreSQL's; the embedded SQLite holds one user's runs")
    users = [User.objects.create_user(f"user{i}") for i in range(USERS)]
    users[0].is_staff = True
    users[0].save()
    seed_runs(users)
    return users


def queries(client: Any, path: str) -> list[str]:
    """The SQL of the queries on runs_run that answering ``path`` made."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code in (200, 286), (path, response.status_code)
    return [q["sql"] for q in captured.captured_queries if 'FROM "runs_run"' in q["sql"]]


def scans(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return [plan] if "Seq Scan on runs_run" in plan else []


def query_strings() -> list[str]:
    """Every combination of the filters, then each with the other values swapped in."""
    names = list(FILTERS)
    found = []
    for values in [FILTERS, {**FILTERS, **OTHER_VALUES}]:
        for size in range(len(names) + 1):
            for chosen in combinations(names, size):
                found.append("&".join(f"{n}={values[n]}" for n in chosen))
    return sorted(set(found))


@pytest.mark.django_db
def test_every_filter_combination_of_the_runs_list_uses_an_index():
    users = seeded_users()
    api, dashboard = APIClient(), Client()
    failures = []
    for user in [users[0], users[1]]:
        api.force_authenticate(user)
        dashboard.force_login(user)
        for query in query_strings():
            for client, path in [
                (api, f"/api/runs/?{query}"),
                (dashboard, f"/runs/table/?{query}"),
            ]:
                for sql in queries(client, path):
                    failures += [f"{user} {path}\n{sql}\n{plan}" for plan in scans(sql)]
    assert not failures, f"{len(failures)} queries read all of runs_run:\n\n" + "\n\n".join(
        failures[:5]
    )


COMMON_NAME_PLANS = [
    ("staff", "name=sweep-9", "run_created_idx"),
    ("staff", "state=failed&name=sweep-9", "run_state_created_idx"),
    ("staff", "owner=user1&name=sweep-9", "run_owner_created_idx"),
    ("user", "name=sweep-9", "run_owner_created_idx"),
]
"""A part of a name that one run in nine has, alone and with a state or an owner: the
runs the page and its count need are met walking the list's index, which carries the name,
or (with a filter that leaves few) by the name's trigram index."""


def plan_of(client: Any, path: str) -> str:
    """The plan of the page's statement of ``path`` (a second, if any, writes the texts of
    runs not kept, by id)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {queries(client, path)[0]}")
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("migrated", [False, True])
def test_a_common_part_of_a_name_is_matched_in_the_lists_index_without_reading_the_table(
    migrated,
):
    """Also right after the name's index is made again by its migration, before autovacuum
    analyzed the table."""
    users = seeded_users()
    with connection.cursor() as cursor:
        # As autovacuum leaves a table of ended runs: its pages marked all-visible, which
        # lets a scan answer from an index alone.
        cursor.execute("VACUUM ANALYZE runs_run")
    if migrated:
        (step,) = NAME_INDEX.Migration.operations
        with connection.schema_editor() as editor:
            step.reverse_code(apps, editor)
            step.code(apps, editor)
    api = APIClient()
    for who, query, index in COMMON_NAME_PLANS:
        api.force_authenticate(users[0] if who == "staff" else users[1])
        plan = plan_of(api, f"/api/runs/?{query}")
        # The list's index walked, or the name's trigram index where PostgreSQL finds the
        # runs it matches fewer (its choice turns on ANALYZE's sample): never the whole table.
        # Besides it, runs_run is read only by id, for the page's rows.
        walked = f"Index Only Scan using {index} on runs_run" in plan
        matched = "Bitmap Index Scan on run_owner_name_trgm_idx" in plan
        assert walked or matched, (who, query, plan)
        assert "Seq Scan on runs_run" not in plan, (who, query, plan)


@pytest.mark.django_db(transaction=True)
def test_a_users_name_filter_reads_one_index_for_both_the_owner_and_the_name():
    """A rare part of a name in a user's own list: the runs of that owner with that name are
    found in one GIN index, not by intersecting the owner's every run with the name's."""
    users = seeded_users()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_run")
    api = APIClient()
    api.force_authenticate(users[1])
    plan = plan_of(api, "/api/runs/?name=4242")
    assert "Bitmap Index Scan on run_owner_name_trgm_idx" in plan, plan
    assert "BitmapAnd" not in plan, plan


@pytest.mark.django_db(transaction=True)
def test_a_list_asked_again_keeps_the_plan_of_its_own_filter_values():
    """A prepared list's generic plan is made for the values it was asked with: a common part
    of a name walks the list's index, a rare one reads the name's, as when planned anew."""
    users = seeded_users()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_run")
    api = APIClient()
    api.force_authenticate(users[0])
    for name, index in [("sweep-9", "run_created_idx"), ("4242", "run_owner_name_trgm_idx")]:
        for _ in range(8):  # past the five custom plans PostgreSQL makes before a generic one
            assert api.get(f"/api/runs/?name={name}").status_code == 200
        with connection.cursor() as cursor:
            cursor.execute("SELECT name, statement, generic_plans FROM pg_prepared_statements")
            ((prepared, generic),) = [
                (row[0], row[2]) for row in cursor.fetchall() if f"'%{name}%'" in row[1]
            ]
            cursor.execute("SET plan_cache_mode = force_generic_plan")
            cursor.execute(f"EXPLAIN EXECUTE {prepared}(now())")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            cursor.execute("RESET plan_cache_mode")
        assert generic > 0, name
        assert index in plan, (name, plan)
        assert "Seq Scan on runs_run" not in plan, (name, plan)
