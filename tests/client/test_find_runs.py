"""``Client.runs`` finds runs by tag, a parameter's value and dates, as the API does; a run is
tagged and noted from Python."""

from __future__ import annotations

import pytest

from runs.client import InvalidRequest
from tests.api.test_compare_and_find import sweep_run
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db(transaction=True)


def test_runs_are_found_by_tag_parameter_and_date_and_tagged_and_noted(client, owner, store):
    cold = sweep_run(owner, store, "cold")
    hot = sweep_run(owner, store, "hot", axis="{linspace: [2, 4, 3]}")
    ended(submitted(owner))

    run = client.run(hot.id).tag("paper", "ising")
    assert run.tags == ["paper", "ising"]
    assert client.tag(cold.id, "paper") == ["paper"]
    assert client.labels(cold.id, note="the cold side") == {
        "tags": ["paper"],
        "note": "the cold side",
    }
    assert client.run(cold.id).note == "the cold side"
    assert run.tag("ising", remove=True).tags == ["paper"]

    def ids(**filters) -> set[str]:
        return {found.id for found in client.runs(**filters)}

    assert ids(tag="paper") == {cold.id, hot.id}
    assert ids(tag=["paper", "ising"]) == set()
    assert ids(param="T=3") == {hot.id}
    assert ids(param="T", created_after="2000-01-01") == {cold.id, hot.id}
    assert ids(param="T", created_before="2000-01-01") == set()
    with pytest.raises(InvalidRequest) as refused:
        client.labels(cold.id, tags=["two words"])
    assert "tags" in refused.value.fields
