"""A few rounds of each harm the service must survive (``bench/chaos.py`` plays many)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.rounds import HARMS, play

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

ROUNDS = 1


@pytest.mark.parametrize("kind", sorted(HARMS))
def test_a_run_survives_the_harm_with_no_unit_lost_and_the_clean_run_s_output(
    kind: str, tmp_path: Path
):
    tally = play(kind, ROUNDS, tmp_path)
    for outcome in tally.outcomes:
        assert outcome.state == "succeeded", tally.line()
        assert outcome.missing == 0 and outcome.identical, tally.line()
