"""Margins that follow a type's own spread: their constants cross-validated, leave one trace out.

simrun's margin is the TARGET quantile of a spread believed from the type's own upper spread
and a prior (``peak_model.believed_margin``): with many samples that is exp(3.09 σ), which
extrapolates a tail no steady type shows. ``Simrun.own_margin`` caps it, once a type has
``SPREAD_N`` effective samples and no recent kill, at exp(``SPREAD_GAIN`` × its own spread),
never below ``MIN_MARGIN`` above the top recent peak. This replays the traces with the
product's planner over a grid of (gain, n, least margin), gain 0 being the policy without
the cap, and chooses by ``bench.cross_validation.leave_one_out``: on the
other traces, a point safe with room to spare (at most half the retries the target allows on
each, no failed task beyond the target), then the one whose worst trace saves most against
that trace's best baseline; the held-out trace scores it. The cap ships only if every
fold's choice is safe on the trace it held out and the folds together waste less than the
policy without it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from bench import sizing_replay as replay
from bench.cross_validation import leave_one_out
from runs.planning.sizing import MIN_MARGIN, SPREAD_GAIN, SPREAD_N, Simrun

Point = tuple[float, float, float]
"""(SPREAD_GAIN, SPREAD_N, MIN_MARGIN)."""
GRID_GAINS = (1.5, 2.0, 2.5)
GRID_NS = (20.0,)
GRID_MIN_MARGINS = (1.02, 1.035, 1.05)
"""The least margin above the top recent peak binds a steady type before its spread does,
so it is on the grid beside the gain. n: 10 and 40 were on an earlier grid (docs/memory.md):
10 retried most, 40 saved least, in every fold."""
OFF: Point = (0.0, SPREAD_N, 1.05)
"""The policy before its margins followed the type's spread: no gain, the least margin 1.05:
the "before" the folds are compared with."""
SHIPPED: Point = (SPREAD_GAIN, SPREAD_N, MIN_MARGIN)
HEADROOM = 0.5
"""A point is safe on a trace it fits with at most this share of the retries the target
allows: a point just under the target on the traces it saw is not safe on the next."""


@dataclass
class Scored:
    """A point's figures on each trace."""

    point: Point
    traces: dict[str, replay.Figures]

    def safe(self, stems: Sequence[str], headroom: float = 1.0) -> bool:
        return all(
            replay.per_1000(self.traces[s]) <= replay.FAILED_PER_1000_TARGET
            and self.traces[s].retries_per_100 < headroom * replay.RETRIES_TARGET
            for s in stems
        )


def choose(
    scored: Sequence[Scored],
    stems: Sequence[str],
    best: dict[str, replay.Figures],
    rule: str = "saving",
) -> Scored:
    """The point chosen on some traces: safe with HEADROOM on each (else the fewest failed,
    then retries, on the worst), then the best worst-trace saving against its best baseline,
    then the least total waste; ties go to the cap off, then to the wider margin (less gain,
    more samples needed). ``rule="retries"`` ranks by the worst trace's retries before its
    saving, as ``--cross-validate`` does: printed beside, to show what that rule would ship."""

    def key(s: Scored) -> tuple[bool, float, float, float, float, float, float, float]:
        unsafe = not s.safe(stems, HEADROOM)
        worst_failed = max(replay.per_1000(s.traces[t]) for t in stems) if unsafe else 0.0
        worst_retries = max(s.traces[t].retries_per_100 for t in stems) if unsafe else 0.0
        worst_saving = min(replay.saving(s.traces[t], best[t]) for t in stems)
        total = round(sum(s.traces[t].wastage.wasted_gbh for t in stems), 3)
        gain, n, least = s.point
        rank = (gain, -n, -least)
        if rule == "retries":
            worst_retries = max(s.traces[t].retries_per_100 for t in stems)
        return (unsafe, worst_failed, worst_retries, -round(worst_saving, 3), total, *rank)

    return min(scored, key=key)


def points() -> list[Point]:
    """The shipped point, the cap off at every least margin, and every point of the grid."""
    off = [(0.0, SPREAD_N, least) for least in GRID_MIN_MARGINS]
    grid = [*off, *itertools.product(GRID_GAINS, GRID_NS, GRID_MIN_MARGINS)]
    return [OFF, *(p for p in grid if p != OFF)]


def figures_at(point: Point, tasks: Sequence[replay.Task]) -> replay.Figures:
    """simrun's figures on one trace with the margin constants of ``point``."""
    gain, n, least = point
    policy = Simrun(spread_gain=gain, spread_n=n, min_margin=least)
    return replay.figures_of("simrun", tasks, policy)


def cross_validate(traces: dict[str, list[replay.Task]]) -> list[str]:
    """The folds (chosen on the other traces, scored on the one held out) beside the policy
    without the cap, the folds together, the grid, and the verdict."""
    stems = list(traces)
    best, names = replay.best_baselines(traces)
    scored = [Scored(p, {s: figures_at(p, t) for s, t in traces.items()}) for p in points()]
    off = scored[0]
    lines = [
        "margins that follow a type's own spread: (gain, n, least) chosen on the other traces",
        f"{'held out':17}{'gain':>5}{'n':>4}{'least':>6}{'wasted':>9}{'before':>9}"
        f"{'best baseline':>22}"
        f"{'saving':>8}{'before':>8}{'retries/100':>12}{'before':>7}{'failed/1000':>12}",
    ]
    folds = leave_one_out(stems, lambda train: choose(scored, train, best))
    held, before, held_best = replay.Figures(), replay.Figures(), replay.Figures()
    for fold in folds:
        stem = fold.held_out
        f, b = fold.chosen.traces[stem], off.traces[stem]
        held.add(f)
        before.add(b)
        held_best.add(best[stem])
        gain, n, least = fold.chosen.point
        lines.append(
            f"{stem:17}{gain:>5g}{n:>4g}{least:>6g}{f.wastage.wasted_gbh:>9.1f}{b.wastage.wasted_gbh:>9.1f}"
            f"{names[stem]:>13}{best[stem].wastage.wasted_gbh:>9.1f}"
            f"{replay.saving(f, best[stem]):>7.1f}%{replay.saving(b, best[stem]):>7.1f}%"
            f"{f.retries_per_100:>12.2f}{b.retries_per_100:>7.2f}{replay.per_1000(f):>12.2f}"
            + ("" if fold.chosen.safe([stem]) else "  UNSAFE held out")
            + ("" if replay.saving(f, best[stem]) >= 0 else "  MORE than its best baseline")
        )
    lines.append(
        f"{'folds together':32}{held.wastage.wasted_gbh:>9.1f}{before.wastage.wasted_gbh:>9.1f}"
        f"{'':13}{held_best.wastage.wasted_gbh:>9.1f}"
        f"{replay.saving(held, held_best):>7.1f}%{replay.saving(before, held_best):>7.1f}%"
        f"{held.retries_per_100:>12.2f}{before.retries_per_100:>7.2f}{replay.per_1000(held):>12.2f}"
    )
    by_retries = leave_one_out(stems, lambda train: choose(scored, train, best, "retries"))
    lines.append(
        "by the fewest retries first (the rule of --cross-validate), the folds pick: "
        + ", ".join(f"{f.held_out} {f.chosen.point}" for f in by_retries)
    )
    lines += ["", "the grid (per trace: wasted GiB·h, retries per 100):"]
    for s in scored:
        cells = "  ".join(
            f"{t} {s.traces[t].wastage.wasted_gbh:.1f} {s.traces[t].retries_per_100:.2f}"
            for t in stems
        )
        lines.append(f"  {s.point}: {cells}")
    holds = all(
        fold.chosen.safe([fold.held_out])
        and replay.saving(fold.chosen.traces[fold.held_out], best[fold.held_out]) >= 0
        for fold in folds
    )
    better = held.wastage.wasted_gbh < before.wastage.wasted_gbh
    everywhere = choose(scored, stems, best).point
    verdict = (
        "holds out of sample: every fold safe on its held-out trace and the folds waste less"
        if holds and better
        else "does NOT hold out of sample: the cap stays off"
    )
    lines.append(f"shipped {SHIPPED}; the rule on every trace picks {everywhere}; {verdict}")
    return lines
