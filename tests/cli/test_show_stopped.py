"""``simrun show`` and the API say a task a cancel stopped while it ran was stopped, though its
record stays skipped."""

from __future__ import annotations

import pytest

from runs.control import cancelling
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


def test_the_api_and_simrun_show_say_it_was_stopped(owner, owner_client, simrun, backend):  # noqa: F811
    cancelled = running(submitted(owner), sweep="running")
    cancelling.cancel(cancelled.id)
    tasks = {t["id"]: t for t in owner_client.get(f"/api/runs/{cancelled.id}/").json()["tasks"]}
    assert tasks["sweep"]["state"] == "skipped"
    assert tasks["sweep"]["shown_state"] == "stopped: run cancelled"
    assert tasks["summary"]["shown_state"] == "skipped"
    shown = simrun("show", cancelled.id)
    assert shown.code == 0, shown.err
    row = next(line for line in shown.out.splitlines() if line.startswith("sweep "))
    assert "stopped: run cancelled" in row
