"""What a round of chaos must show: its harm landed and the run ended as a clean one does."""

from __future__ import annotations

from tests.chaos import rounds
from tests.chaos.rounds import UNITS, Tally


def assert_survived(tally: Tally) -> None:
    """Every round's harm landed, and its run succeeded with every unit once and the clean
    run's output (a resumed run reused some units; a neighbour failed on its own budget)."""
    for outcome in tally.outcomes:
        said = tally.line() + f"\n{outcome.note}"
        assert outcome.landed, said
        assert outcome.state == "succeeded", said
        assert outcome.missing == 0 and outcome.identical, said
        assert outcome.twice == 0, said
        if tally.kind in rounds.RESUMED:
            assert 0 < outcome.reused < UNITS, outcome.note
        if tally.kind in rounds.NEIGHBOURS:  # the flood failed on its own budget
            assert rounds.NOISE_BUDGET in outcome.note, outcome.note
