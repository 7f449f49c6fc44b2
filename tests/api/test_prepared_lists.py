"""The runs lists' statements are prepared on their connection: planned once, for the values
of their filters, which are written into the statement (``runs.common.prepared``)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import DatabaseError, connection, connections
from django.test import Client

from runs.common.prepared import preparing_cursor
from runs.models import Run

pytestmark = pytest.mark.django_db


def prepared_pages() -> list[tuple[str, list[str], int, int]]:
    """The lists' page statements prepared on this connection: their text, the types of
    their parameters, their generic plans and their custom plans so far."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, parameter_types::text[], generic_plans, custom_plans "
            "FROM pg_prepared_statements WHERE statement LIKE %s",
            ['%"runs_run"."xmin"%COUNT(*)%'],
        )
        return cursor.fetchall()


def named(client, path: str, **query: str) -> list[str]:
    """The names of the runs a list of the API (JSON) or the dashboard (HTML) shows."""
    response = client.get(path, query)
    assert response.status_code in (200, 286), response.content[:300]
    if path.startswith("/api/"):
        return sorted(run["name"] for run in json.loads(response.content)["results"])
    return sorted(run.name for run in Run.objects.all() if f'data-run="{run.pk}"' in response.text)


def test_a_list_asked_again_is_prepared_and_then_planned_no_more(owner, owner_client):
    for i in range(3):
        Run.objects.create(owner=owner, name=f"run-{i}", spec={}, backend="fake")
    assert prepared_pages() == []
    for _ in range(8):
        assert owner_client.get("/api/runs/").status_code == 200
    # The first is run as it is, the second prepares it; after five plans made for their
    # values, PostgreSQL keeps one: each run since is planned no more.
    ((statement, types, generic, custom),) = prepared_pages()
    assert (custom, generic) == (5, 2), statement


def test_the_filters_values_are_in_the_statement_and_only_the_time_is_a_parameter(
    owner, owner_client
):
    for _ in range(2):
        owner_client.get("/api/runs/", {"name": "needle", "state": "failed", "owner": "alice"})
    ((statement, types, _, _),) = prepared_pages()
    assert types == ["timestamp with time zone"]
    assert "'%needle%'" in statement and "'failed'" in statement and "'alice'" in statement


@pytest.mark.parametrize("part", ["%", "_", "'", "\\", "%s", "%%", "{}", "$1", "é"])
def test_a_name_filter_of_quotes_wildcards_and_placeholders_matches_them_as_written(
    owner, owner_client, part
):
    """Each asked twice, the second time through its prepared statement."""
    for name in [f"a{part}b", "axb", "ab", "plain"]:
        Run.objects.create(owner=owner, name=name, spec={}, backend="fake")
    dashboard = Client()
    dashboard.force_login(owner)
    for _ in range(2):
        assert named(owner_client, "/api/runs/", name=part) == [f"a{part}b"]
        assert named(dashboard, "/runs/table/", name=part) == [f"a{part}b"]


def test_a_preparing_cursor_refuses_another_threads_connection_as_djangos_do():
    with ThreadPoolExecutor(1) as pool:
        failed = pool.submit(preparing_cursor, connections["default"]).exception()
    assert isinstance(failed, DatabaseError) and "same thread" in str(failed)
