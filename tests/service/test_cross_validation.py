"""bench/cross_validation.py: the procedure that chooses the sizing constants holds each trace
out of its own choice, and its figures are the held-out trace's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cross_validation import leave_one_out  # noqa: E402

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
