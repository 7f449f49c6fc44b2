"""The lines of a results chart: the mean of y at each x, a line per value of the colour column.

At most ``MAX_SERIES`` lines of at most ``MAX_POINTS`` points: more distinct x are averaged
into equal bins. The std beside a mean is drawn as error bars.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import mark_safe

from runs.reads.results import MISSING, Results
from runs.web.chart_choice import MAX_SERIES, Choice
from runs.web.chart_frame import (
    BOTTOM,
    HEIGHT,
    LEFT,
    LEGEND_W,
    TOP,
    WIDTH,
    Axis,
    Plot,
    empty_svg,
    figure,
    frame,
    plotted,
    short,
    svg_open,
)

MAX_POINTS = 400
"""Points of a line at most; a line over more distinct x is averaged into this many bins."""
DOTS_UP_TO = 60
"""A line of at most this many points marks each with a dot (and its figures as a tooltip)."""


@dataclass
class Series:
    label: str
    points: list[tuple[float, float, int]]
    """(x, mean y, rows averaged) by x."""
    spreads: dict[float, float] = field(default_factory=dict)
    """The spread (the mean std) of y at each x, where y is an average's mean."""


def spread_column(results: Results, y: str) -> str | None:
    """The std beside a mean (``energy std`` for ``energy mean``), drawn as error bars."""
    if not y.endswith(" mean"):
        return None
    std = y.removesuffix(" mean") + " std"
    return std if results.numeric(std) else None


def lines(results: Results, choice: Choice) -> Plot:
    """The mean of y at each x, a line per value of the colour column."""
    notes: list[str] = []
    series = line_series(results, choice, notes)
    if not series:
        return Plot(empty_svg("no row has both an x and a y"), notes)
    width = WIDTH - (LEGEND_W if choice.colour else 0)
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] + d * s.spreads.get(p[0], 0.0) for s in series for p in s.points for d in (-1, 1)]
    x_axis, y_axis = Axis.of(xs, LEFT, width - 16), Axis.of(ys, HEIGHT - BOTTOM, TOP)
    parts = [
        svg_open(f"{choice.y} against {choice.x}", choice, len(series)),
        *frame(x_axis, y_axis, width, choice.x, choice.y),
    ]
    for index, one in enumerate(series):
        points = " ".join(f"{x_axis(x):.1f},{y_axis(y):.1f}" for x, y, _ in one.points)
        label = escape(one.label)
        title = f"<title>{escape(choice.colour)} = {label}</title>" if choice.colour else ""
        parts.append(
            f'<g class="series series-{index}" data-series="{label}">{title}'
            f'<polyline points="{points}"/>'
        )
        for x, y, _ in one.points:
            if (spread := one.spreads.get(x)) is not None:
                parts.append(
                    f'<line class="spread" data-spread x1="{x_axis(x):.1f}" x2="{x_axis(x):.1f}" '
                    f'y1="{y_axis(y - spread):.1f}" y2="{y_axis(y + spread):.1f}"/>'
                )
        if len(one.points) <= DOTS_UP_TO:
            for x, y, count in one.points:
                tip = escape(
                    f"{choice.x} = {figure(x)}, {choice.y} = {figure(y)}"
                    + (f" (mean of {count})" if count > 1 else "")
                    + (f", {choice.colour} = {one.label}" if choice.colour else "")
                )
                parts.append(
                    f'<circle cx="{x_axis(x):.1f}" cy="{y_axis(y):.1f}" r="3">'
                    f"<title>{tip}</title></circle>"
                )
        parts.append("</g>")
    if choice.colour:
        parts.append(line_legend(series, choice.colour, width))
    parts.append("</svg>")
    return Plot(mark_safe("".join(parts)), notes)  # noqa: S308 - numbers and escaped text only


def line_series(results: Results, choice: Choice, notes: list[str]) -> list[Series]:
    """The lines of a choice: rows grouped by colour, averaged at each x, binned past
    ``MAX_POINTS``; at most ``MAX_SERIES`` lines, the first values of the colour column."""
    xs, ys = plotted(results.numbers[choice.x]), plotted(results.numbers[choice.y])
    keys, label = colour_keys(results, choice.colour)
    spread = spread_column(results, choice.y)
    stds = plotted(results.numbers[spread]) if spread else [None] * len(xs)
    sums: dict[object, dict[float, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0, 0, 0])
    )
    skipped = 0
    for x, y, key, std in zip(xs, ys, keys, stds, strict=True):
        if x is None or y is None:
            skipped += 1
            continue
        total = sums[key][x]
        total[0] += y
        total[1] += 1
        if std is not None:
            total[2] += std
            total[3] += 1
    if skipped:
        rows = "1 row" if skipped == 1 else f"{skipped:,} rows"
        notes.append(f"{rows} without a finite {choice.x} and {choice.y} left out")
    ordered = sorted(sums, key=sort_key)
    if len(ordered) > MAX_SERIES:
        notes.append(
            f"{choice.colour} has {len(ordered):,} values: the lines of the first {MAX_SERIES} "
            "are drawn (a heat map shows them all)"
        )
        ordered = ordered[:MAX_SERIES]
    found = []
    most = 0
    for key in ordered:
        points = [(x, s / n, int(n)) for x, (s, n, _, _) in sorted(sums[key].items())]
        most = max(most, len(points))
        spreads = {x: d / m for x, (_, _, d, m) in sums[key].items() if m}
        if len(points) > MAX_POINTS:
            points, spreads = binned(points, MAX_POINTS), {}
        found.append(Series(label(key), points, spreads))
    if most > MAX_POINTS:
        notes.append(
            f"up to {most:,} distinct {choice.x} in a line: averaged into {MAX_POINTS} bins"
        )
    return found


def colour_keys(results: Results, colour: str) -> tuple[Sequence[object], Callable[[object], str]]:
    """Each row's key of the colour column (numbers as numbers) and how a key is labelled."""
    if not colour:
        return [None] * len(results.rows), lambda key: "all"
    if results.numeric(colour):
        return results.numbers[colour], lambda key: "none" if key is None else figure(key)
    return [
        "" if cell in MISSING else cell for cell in results.values(colour)
    ], lambda key: str(key) or "none"


def sort_key(key: object) -> tuple[int, float, str]:
    """Keys of a colour column in order: numbers by value, texts by text, no value last."""
    if key is None or key == "":
        return (2, 0.0, "")
    if isinstance(key, float | int):
        return (0, float(key), "")
    return (1, 0.0, str(key))


def binned(points: list[tuple[float, float, int]], bins: int) -> list[tuple[float, float, int]]:
    """Points averaged into ``bins`` equal ranges of x, each weighted by its rows."""
    low, high = points[0][0], points[-1][0]
    span = (high - low) or 1.0
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for x, y, count in points:
        slot = sums[min(bins - 1, int((x - low) / span * bins))]
        slot[0] += x * count
        slot[1] += y * count
        slot[2] += count
    return [(sx / n, sy / n, int(n)) for _, (sx, sy, n) in sorted(sums.items())]


def line_legend(series: list[Series], colour: str, left: float) -> str:
    parts = [
        f'<g class="legend-lines"><text class="axis" x="{left + 8:.0f}" y="{TOP + 4}">'
        f"{escape(short(colour))}</text>"
    ]
    for index, one in enumerate(series):
        y = TOP + 22 + index * 18
        parts.append(
            f'<g class="series series-{index}"><line x1="{left + 8:.0f}" x2="{left + 30:.0f}" '
            f'y1="{y - 4}" y2="{y - 4}"/><text class="tick" x="{left + 36:.0f}" y="{y}">'
            f"{escape(short(one.label))}</text></g>"
        )
    parts.append("</g>")
    return "".join(parts)
