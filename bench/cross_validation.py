"""Leave-one-trace-out cross-validation: the one procedure that chooses sizing constants.

Each fold holds one trace out, chooses a point of a grid on the other traces only, and scores
that choice on the trace held out. The held-out figures are what a deployment whose traces
nobody tuned on can expect, so they are the figures reported; a point's figures on the traces
it was chosen on say nothing of that. The constants shipped are what the same rule of choice
picks on every trace, judged by the folds' held-out figures alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

Point = TypeVar("Point")


@dataclass(frozen=True)
class Fold(Generic[Point]):
    """One fold: the trace held out, the traces the choice saw, and the point chosen."""

    held_out: str
    trained_on: tuple[str, ...]
    chosen: Point


def leave_one_out(
    stems: Sequence[str], choose: Callable[[Sequence[str]], Point]
) -> list[Fold[Point]]:
    """One fold per trace, in order: ``choose`` is called with every trace but the one held
    out, and never sees it. Fewer than two traces cannot be cross-validated."""
    if len(stems) < 2 or len(set(stems)) != len(stems):
        raise ValueError("cross-validation needs at least two distinct traces")
    folds = []
    for held in stems:
        trained = tuple(s for s in stems if s != held)
        folds.append(Fold(held, trained, choose(trained)))
    return folds


Constants = tuple[tuple[str, float], ...]
"""A point of many constants: (name, value) pairs in a fixed order, hashable."""


def with_value(point: Constants, name: str, value: float) -> Constants:
    """The point with one constant set to ``value``."""
    return tuple((n, value if n == name else v) for n, v in point)


def start_of(candidates: Mapping[str, Sequence[float]]) -> Constants:
    """Where a choice starts: the middle value of each constant's candidates, fixed before any
    trace is read (a start chosen on the traces would carry a held-out trace into its fold)."""
    return tuple((name, values[len(values) // 2]) for name, values in candidates.items())


def coordinate_choice(
    candidates: Mapping[str, Sequence[float]],
    best_of: Callable[[Sequence[Constants]], Constants],
) -> list[Constants]:
    """One pass of a choice of many constants, one at a time: from ``start_of``, each constant
    in turn takes the value ``best_of`` prefers among its candidates, the others held where the
    pass has put them. The value it stands on is offered first, so a rule that keeps the first
    of the points the traces cannot tell apart moves only on evidence. Returns the points the
    pass stood on, the chosen one last.

    ``best_of`` is the rule of choice, bound to the traces a fold fits: a grid of every
    combination would cost the product of the candidates' counts in replays, this their sum.
    """
    point = start_of(candidates)
    path = [point]
    for name, values in candidates.items():
        here = dict(point)[name]
        ordered = [here, *(value for value in values if value != here)]
        point = best_of([with_value(point, name, value) for value in ordered])
        path.append(point)
    return path
