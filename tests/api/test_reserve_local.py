"""A backend without nodes to reserve refuses ``reserve_node`` at submission, with a 400."""

from __future__ import annotations

import pytest

from runs.backends.local.backend import LocalBackend
from runs.models import Run

pytestmark = pytest.mark.django_db


def test_reserve_node_on_the_local_backend_is_a_400_and_no_run(owner_client, tmp_path, monkeypatch):
    backend = LocalBackend(store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2)
    monkeypatch.setattr("runs.planning.submission.get_backend", lambda: backend)
    spec = "reserve_node: true\ntasks:\n  say: {command: [echo, hi]}\n"

    response = owner_client.post("/api/runs/", data=spec, content_type="application/yaml")

    assert response.status_code == 400
    assert response.json() == {
        "reserve_node": ["the local backend has no nodes to reserve: submit without it"]
    }
    assert not Run.objects.exists()
