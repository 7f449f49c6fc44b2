"""The run detail's attempts: running, for how long, the measured peak, the live samples."""

from __future__ import annotations

import pytest

from tests.api.live_attempts import MIB, SAMPLES, with_live_attempts
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


def test_a_running_attempt_has_its_start_duration_peak_so_far_and_samples(
    owner_client, owner, store
):
    run = running(submitted(owner), sweep="running")
    with_live_attempts(run)

    [sweep] = [
        t for t in owner_client.get(f"/api/runs/{run.id}/").json()["tasks"] if t["id"] == "sweep"
    ]
    ended, live = sweep["attempts"]

    assert live["running"] is True and live["phase"] == "Running" and live["node_name"] == "node-b"
    assert live["started_at"] is not None and 65 <= live["duration_s"] < 120
    assert live["peak_bytes"] == 600 * MIB and live["memory_gb"] == 1.5
    assert [b for _, b in live["memory_samples"]] == SAMPLES
    assert ended["running"] is False and ended["duration_s"] == pytest.approx(90, abs=0.01)
    assert ended["peak_bytes"] == 700 * MIB and ended["memory_samples"] == []
    assert ended["ended_at"] is not None


def test_an_attempt_of_an_ended_run_no_longer_runs(owner_client, owner, store):
    run = running(submitted(owner), sweep="running")
    with_live_attempts(run)
    owner_client.post(f"/api/runs/{run.id}/cancel/")

    [sweep] = [
        t for t in owner_client.get(f"/api/runs/{run.id}/").json()["tasks"] if t["id"] == "sweep"
    ]
    live = sweep["attempts"][1]

    assert live["running"] is False and live["phase"] == "Stopped"
    assert live["memory_samples"] == [] and live["peak_bytes"] == 600 * MIB
