"""The Reservations page says why a backend offers no reservations."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

WHY = "a reservation needs the Operator level of the cluster, which alice lacks"


def test_the_reservations_page_says_why_no_node_can_be_reserved(client, owner, backend):
    backend.reserves_nodes, backend.no_reservations = False, WHY
    client.force_login(owner)
    page = client.get("/nodes/").content.decode()
    assert f"Reservations are not offered here: {WHY}" in page


def test_the_reservations_page_says_nothing_of_the_kind_where_nodes_can_be_reserved(
    client, owner, backend
):
    client.force_login(owner)
    assert "data-no-reservations" not in client.get("/nodes/").content.decode()
