"""bench/cross_validation.py: the procedure that chooses the sizing constants holds each trace
out of its own choice, and its figures are the held-out trace's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cross_validation import coordinate_choice, leave_one_out, start_of  # noqa: E402

# A grid of two points on three traces, waste by trace: "fit" is best on a and b (and on the
# total of all three) but wastes most on c; "robust" is a little worse on each, never far.
WASTE = {
    "fit": {"a": 10.0, "b": 10.0, "c": 90.0},
    "robust": {"a": 20.0, "b": 20.0, "c": 25.0},
}


def by_total(stems):
    """The rule the issue forbids when it sees every trace: least waste over the traces seen."""
    return min(WASTE, key=lambda point: sum(WASTE[point][s] for s in stems))


def test_each_fold_chooses_without_the_trace_it_holds_out():
    seen: list[tuple[str, ...]] = []

    def spy(stems):
        seen.append(tuple(stems))
        return by_total(stems)

    folds = leave_one_out(["a", "b", "c"], spy)

    assert [f.held_out for f in folds] == ["a", "b", "c"]
    assert seen == [("b", "c"), ("a", "c"), ("a", "b")]
    for fold in folds:
        assert fold.held_out not in fold.trained_on
        assert set(fold.trained_on) | {fold.held_out} == {"a", "b", "c"}


def test_the_held_out_figures_expose_a_point_that_only_fits_the_traces_it_saw():
    """Chosen on all three traces by their total, "fit" looks best (110 against 65 is not its
    figure: it is chosen on traces it is then scored on); held out, the fold that never saw c
    picks it and pays 90 on c, which the folds report."""
    folds = leave_one_out(["a", "b", "c"], by_total)
    held_out = {f.held_out: (f.chosen, WASTE[f.chosen][f.held_out]) for f in folds}

    assert held_out["c"] == ("fit", 90.0)
    assert sum(waste for _, waste in held_out.values()) > sum(WASTE["robust"].values())


@pytest.mark.parametrize("stems", [[], ["a"], ["a", "a"]])
def test_fewer_than_two_distinct_traces_cannot_be_cross_validated(stems):
    with pytest.raises(ValueError, match="two distinct traces"):
        leave_one_out(stems, by_total)


# Two constants on three traces, waste by trace (x, y) → cost. On a and b a low x and y=1
# waste least; c needs x = 3 (its tasks grow): a choice on every trace (the total) takes x = 3,
# a choice that never saw c takes x = 1, and pays for it on c.
CANDIDATES = {"x": (1.0, 2.0, 3.0), "y": (1.0, 2.0)}


def cost(stem: str, point) -> float:
    x, y = dict(point)["x"], dict(point)["y"]
    if stem == "c":
        return 10.0 * abs(3 - x) + y
    return x + 2 * y


def test_a_choice_of_many_constants_holds_each_trace_out_and_shows_what_it_costs_there():
    """Each fold's pass of the constants one at a time sees only the traces it fits (the rule
    is handed no other, at any step); the fold that holds c out chooses a point unlike the one
    chosen on every trace, and its held-out cost is the cost of that point on c."""
    asked: list[tuple[str, tuple[str, ...]]] = []

    def choice(train):
        def best_of(points):
            asked.extend((stem, tuple(train)) for stem in train)
            return min(points, key=lambda p: sum(cost(s, p) for s in train))

        return coordinate_choice(CANDIDATES, best_of)[-1]

    folds = leave_one_out(["a", "b", "c"], choice)
    everywhere = choice(["a", "b", "c"])

    for fold in folds:
        assert all(stem != fold.held_out for stem, train in asked if train == fold.trained_on)
    held_c = next(f for f in folds if f.held_out == "c")
    assert dict(held_c.chosen) == {"x": 1.0, "y": 1.0}
    assert dict(everywhere) == {"x": 3.0, "y": 1.0}
    assert cost("c", held_c.chosen) == 21.0 > cost("c", everywhere)


def test_a_pass_starts_from_the_middle_and_moves_only_on_evidence():
    """The start is fixed before any trace is read; a rule that cannot tell the candidates
    apart (it keeps the first offered) leaves every constant where it stands."""
    assert start_of(CANDIDATES) == (("x", 2.0), ("y", 2.0))
    path = coordinate_choice(CANDIDATES, lambda points: points[0])
    assert path == [start_of(CANDIDATES)] * 3
