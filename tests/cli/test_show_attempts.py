"""``simrun show`` lists every attempt from the moment it runs: its node, start, duration,
measured peak beside its limit."""

from __future__ import annotations

import pytest

from tests.api.live_attempts import with_live_attempts
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


def test_show_lists_a_running_attempt_with_its_duration_so_far_and_peak(simrun, owner, store):
    run = running(submitted(owner), sweep="running")
    ended, live = with_live_attempts(run)

    shown = simrun("show", run.id)

    assert shown.code == 0, shown.err
    lines = {line.split()[1]: line for line in shown.out.splitlines() if "sweep-w" in line}
    assert "Running" in lines["sweep-w1"] and "node-b" in lines["sweep-w1"]
    assert live.started_at.strftime("%H:%M:%S") in lines["sweep-w1"]
    assert "so far" in lines["sweep-w1"] and "0.59 / 1.5 GiB" in lines["sweep-w1"]
    assert "1m 30s" in lines["sweep-w0"] and "0.68 / 1.5 GiB" in lines["sweep-w0"]


def test_show_piped_without_a_width_cuts_no_cell(simrun, owner, store):
    run = running(submitted(owner), sweep="running")
    with_live_attempts(run)

    shown = simrun("show", run.id, columns=None)

    assert shown.code == 0, shown.err
    assert "…" not in shown.out
    rows = [line.split() for line in shown.out.splitlines() if "sweep-w" in line]
    assert {row[1] for row in rows} == {"sweep-w0", "sweep-w1"}
    assert any("Succeeded" in row for row in rows) and any("Running" in row for row in rows)
