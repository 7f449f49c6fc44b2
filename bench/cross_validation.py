"""Leave-one-trace-out cross-validation: the one procedure that chooses sizing constants.

Each fold holds one trace out, chooses a point of a grid on the other traces only, and scores
that choice on the trace held out. The held-out figures are what a deployment whose traces
nobody tuned on can expect, so they are the figures reported; a point's figures on the traces
it was chosen on say nothing of that. The constants shipped are what the same rule of choice
picks on every trace, judged by the folds' held-out figures alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
