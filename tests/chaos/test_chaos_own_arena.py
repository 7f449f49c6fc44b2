"""The harms whose arena is made for them (a small disk, a root serve with task users),
each a round against a serve of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.rounds import OWN_ARENA, play
from tests.chaos.survived import assert_survived

ROUNDS = 1


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(OWN_ARENA))
def test_a_run_survives_the_harm_with_no_unit_lost_and_the_clean_run_s_output(
    kind: str, tmp_path: Path
):
    assert_survived(play(kind, ROUNDS, tmp_path))
