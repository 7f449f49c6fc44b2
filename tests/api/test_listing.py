"""The runs a list shows (``runs.reads.listing``): what the viewer may see, filtered, its SQL
compiled once per process for each viewer and filters."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.http import QueryDict
from django.utils import timezone
from rest_framework.test import APIClient

from runs.models import Run, RunState
from runs.reads import listing as listing_module
from runs.reads.listing import Listing, matched_sql
from runs.reads.run_filters import RunFilters, apply_filters, filter_values, validated
from tests.api.test_list_plans import query_strings

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def compiled(monkeypatch) -> list[Listing]:
    """The listings whose runs were built (and so compiled), in order; none kept before."""
    matched_sql.cache_clear()
    built: list[Listing] = []
    runs = Listing.runs

    def counted(self: Listing):
        built.append(self)
        return runs(self)

    monkeypatch.setattr(listing_module.Listing, "runs", counted)
    yield built
    matched_sql.cache_clear()


@pytest.fixture
def users(owner, stranger, staff) -> dict[str, User]:
    for user, state in [(owner, RunState.FAILED), (stranger, RunState.FAILED)]:
        for i in range(2):
            Run.objects.create(
                owner=user,
                name=f"{user.username}-{i}",
                spec={},
                backend="fake",
                state=state,
                ended_at=timezone.now(),
            )
    return {"owner": owner, "stranger": stranger, "staff": staff}


def client_of(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def names(client: APIClient, query: str = "") -> list[str]:
    response = client.get(f"/api/runs/?{query}")
    assert response.status_code == 200, response.content[:300]
    return sorted(run["name"] for run in response.json()["results"])


@pytest.mark.parametrize("who", ["staff", "owner"])
def test_every_filter_combination_is_the_runs_the_viewer_may_see_so_filtered(users, who):
    user = users[who]
    for query in query_strings():
        values, errors = filter_values(QueryDict(query))
        assert not errors, (query, errors)
        expected = apply_filters(Run.objects.visible_to(user), values)
        assert str(Listing.of(user, values).runs().query) == str(expected.query), query


def test_the_same_filters_are_compiled_once_and_other_filters_again(users, compiled):
    client = client_of(users["owner"])
    for _ in range(3):
        assert names(client, "state=failed") == ["alice-0", "alice-1"]
    assert len(compiled) == 1
    assert names(client, "state=failed&name=1") == ["alice-1"]
    assert names(client, "name=1&state=failed") == ["alice-1"]  # the same filters
    assert len(compiled) == 2


def test_viewers_with_the_same_filters_each_see_what_they_may(users):
    clients = {who: client_of(user) for who, user in users.items()}
    for _ in range(2):
        assert names(clients["owner"], "state=failed") == ["alice-0", "alice-1"]
        assert names(clients["stranger"], "state=failed") == ["mallory-0", "mallory-1"]
        assert names(clients["staff"], "state=failed") == [
            "alice-0",
            "alice-1",
            "mallory-0",
            "mallory-1",
        ]


def test_states_asked_in_any_order_are_one_listing(owner):
    one, _ = filter_values(QueryDict("state=failed&state=running"))
    other, _ = filter_values(QueryDict("state=running&state=failed"))
    assert Listing.of(owner, one) == Listing.of(owner, other)
    assert hash(Listing.of(owner, one)) == hash(Listing.of(owner, other))


def test_a_user_made_staff_lists_every_run(users):
    client = client_of(users["owner"])
    assert names(client) == ["alice-0", "alice-1"]
    users["owner"].is_staff = True
    users["owner"].save()
    assert names(client) == ["alice-0", "alice-1", "mallory-0", "mallory-1"]


@pytest.fixture
def validations(monkeypatch) -> list[dict]:
    """The filters the serializer validated, in order; none kept before."""
    validated.cache_clear()
    seen: list[dict] = []
    is_valid = RunFilters.is_valid

    def counted(self, **kwargs):
        seen.append(dict(self.initial_data.lists()))
        return is_valid(self, **kwargs)

    monkeypatch.setattr(RunFilters, "is_valid", counted)
    yield seen
    validated.cache_clear()


def test_the_same_filters_are_validated_once_whatever_the_page(users, validations):
    client = client_of(users["owner"])
    for query in ["state=failed&name=a", "name=a&state=failed&page_size=1", "state=failed&name=a"]:
        assert client.get(f"/api/runs/?{query}").status_code == 200
    assert validations == [{"name": ["a"], "state": ["failed"]}]
    for _ in range(2):
        response = client.get("/api/runs/?state=failed&created_after=yesterday")
        assert response.status_code == 400 and "created_after" in response.json()
    assert len(validations) == 2


def test_a_callers_change_to_the_values_is_not_kept(validations):
    values, _ = filter_values(QueryDict("state=failed&name=a"))
    values["name"] = "changed"
    again, _ = filter_values(QueryDict("state=failed&name=a"))
    assert again["name"] == "a" and again["state"] == frozenset({"failed"})
