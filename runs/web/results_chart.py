"""The plot of a task's results table, drawn by the server as SVG like the page's other charts.

Two kinds: **lines**, the mean of y at each x, a line per value of the colour column (one line
without one); and a **heat map** over x and the colour column, each cell coloured by the mean
y of its rows. Work is bounded whatever the table: at most ``MAX_SERIES`` lines of at most
``MAX_POINTS`` points (more distinct x are averaged into equal bins), at most ``HEAT_CELLS``
cells a side. Every value placed into the markup is a number or escaped text.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from runs.reads.results import MISSING, Results
from runs.reads.table_views import BadView

KINDS = {"lines": "lines", "heatmap": "heat map"}
MAX_SERIES = 10
"""Lines drawn at most: the palette's colours (``.series-0`` to ``.series-9``)."""
MAX_POINTS = 400
"""Points of a line at most; a line over more distinct x is averaged into this many bins."""
DOTS_UP_TO = 60
"""A line of at most this many points marks each with a dot (and its figures as a tooltip)."""
HEAT_CELLS = 64
"""Cells of a heat map along each axis at most; more distinct numbers are binned."""
LABEL_CHARS = 18
PLOTTABLE = 1e300
"""Numbers beyond this are left out of a plot, as no value: its axes' arithmetic stays finite."""
WIDTH = 760
HEIGHT = 330
LEFT = 64
TOP = 16
BOTTOM = 44
LEGEND_W = 150
VIRIDIS = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
"""The stops of the heat map's colour scale, low to high (perceptually even, colour-blind safe)."""


class BadChoice(BadView):
    """A choice of the plot that names no fitting column: ``field`` says which one."""


@dataclass(frozen=True)
class Choice:
    """What to plot: the columns on x and y, the colour column ("" for none) and the kind."""

    x: str
    y: str
    colour: str
    kind: str = "lines"


@dataclass
class Plot:
    """A drawn plot: its SVG, and what it left out in words."""

    svg: SafeString
    notes: list[str] = field(default_factory=list)


def default_choice(results: Results) -> Choice | None:
    """The first numeric parameter on x, the first numeric result field on y, and a line per
    value of the next parameter when it has few values; None without two numeric columns."""
    numeric = [c for c in results.columns if results.numeric(c)]
    parameters = [c for c in results.parameters() if results.numeric(c)]
    fields = [c for c in results.result_fields() if results.numeric(c)]
    x = next(iter(parameters), None) or next((c for c in numeric if c != "unit"), None)
    if x is None:
        return None
    y = next((c for c in fields if c != x), None) or next((c for c in numeric if c != x), None)
    if y is None:
        return None
    colour = next(
        (
            c
            for c in results.parameters()
            if c not in (x, y) and len(set(results.values(c))) <= MAX_SERIES
        ),
        "",
    )
    return Choice(x, y, colour)


def choice_from(query: Mapping[str, str], results: Results) -> Choice | None:
    """The plot a query asks for (``x``, ``y``, ``colour``, ``kind``), the defaults filling in
    what it does not say; ``BadChoice`` naming the field for a column that does not fit."""
    default = default_choice(results)
    if default is None:
        return None
    kind = query.get("kind") or default.kind
    if kind not in KINDS:
        raise BadChoice("kind", f"one of {', '.join(KINDS)}")
    chosen = {
        name: query.get(name, getattr(default, name)) or getattr(default, name)
        for name in ("x", "y")
    }
    for name, column in chosen.items():
        if not results.numeric(column):
            raise BadChoice(name, f"{column[:80]!r} is no numeric column of the table")
    colour = query.get("colour", default.colour)
    if colour and colour not in results.columns:
        raise BadChoice("colour", f"{colour[:80]!r} is no column of the table")
    return Choice(chosen["x"], chosen["y"], colour, kind)


def draw(results: Results, choice: Choice) -> Plot:
    """The plot a choice asks for."""
    if choice.kind == "heatmap":
        return heat_map(results, choice)
    return lines(results, choice)


# Lines


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
        notes.append(f"{skipped:,} row(s) without a finite {choice.x} and {choice.y} left out")
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


# Heat map


@dataclass
class Cells:
    """The categories of one axis of a heat map and the cell of each row (None: none)."""

    labels: list[str]
    of_row: list[int | None]


def heat_map(results: Results, choice: Choice) -> Plot:
    """A cell per (x, colour) pair, coloured by the mean y of its rows."""
    notes: list[str] = []
    if not choice.colour:
        return Plot(empty_svg("a heat map needs a colour column for its rows"), notes)
    columns = cells_of(results, choice.x, notes), cells_of(results, choice.colour, notes)
    ys = plotted(results.numbers[choice.y])
    sums: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for across, down, y in zip(columns[0].of_row, columns[1].of_row, ys, strict=True):
        if across is None or down is None or y is None:
            continue
        total = sums[across, down]
        total[0] += y
        total[1] += 1
    if not sums:
        return Plot(empty_svg(f"no row has an {choice.x}, a {choice.colour} and a y"), notes)
    means = {cell: s / n for cell, (s, n) in sums.items()}
    low, high = min(means.values()), max(means.values())
    width = WIDTH - LEGEND_W
    cols, rows = len(columns[0].labels), len(columns[1].labels)
    cell_w, cell_h = (width - 16 - LEFT) / cols, (HEIGHT - BOTTOM - TOP) / rows
    parts = [svg_open(f"mean {choice.y} over {choice.x} and {choice.colour}", choice, rows)]
    for (across, down), mean in sorted(means.items()):
        x, y = LEFT + across * cell_w, HEIGHT - BOTTOM - (down + 1) * cell_h
        tip = escape(
            f"{choice.x} = {columns[0].labels[across]}, {choice.colour} = "
            f"{columns[1].labels[down]}: mean {choice.y} = {figure(mean)} "
            f"({int(sums[across, down][1])} row(s))"
        )
        parts.append(
            f'<rect class="cell" data-cell x="{x:.1f}" y="{y:.1f}" width="{cell_w + 0.2:.1f}" '
            f'height="{cell_h + 0.2:.1f}" fill="{shade(mean, low, high)}"><title>{tip}</title>'
            "</rect>"
        )
    parts += category_ticks(columns[0].labels, columns[1].labels, cell_w, cell_h)
    parts += axis_names(width, choice.x, choice.colour)
    parts.append(colour_bar(low, high, width, choice.y))
    parts.append("</svg>")
    return Plot(mark_safe("".join(parts)), notes)  # noqa: S308 - numbers and escaped text only


def cells_of(results: Results, column: str, notes: list[str]) -> Cells:
    """The categories of a heat map's axis: its distinct values in order, numbers binned into
    ``HEAT_CELLS`` equal ranges past that many, texts past that many cut to the first."""
    if results.numeric(column):
        values = plotted(results.numbers[column])
        distinct = sorted({v for v in values if v is not None})
        if len(distinct) <= HEAT_CELLS:
            place = {v: i for i, v in enumerate(distinct)}
            return Cells(
                [figure(v) for v in distinct],
                [None if v is None else place.get(v) for v in values],
            )
        notes.append(f"{len(distinct):,} distinct {column}: binned into {HEAT_CELLS} ranges")
        low, span = distinct[0], (distinct[-1] - distinct[0])
        step = span / HEAT_CELLS
        labels = [
            f"{figure(low + i * step)}–{figure(low + (i + 1) * step)}" for i in range(HEAT_CELLS)
        ]
        return Cells(
            labels,
            [
                None if v is None else min(HEAT_CELLS - 1, int((v - low) / span * HEAT_CELLS))
                for v in values
            ],
        )
    cells = ["" if c in MISSING else c for c in results.values(column)]
    distinct_text = sorted({c for c in cells if c})
    if len(distinct_text) > HEAT_CELLS:
        notes.append(
            f"{column} has {len(distinct_text):,} values: the first {HEAT_CELLS} are drawn"
        )
        distinct_text = distinct_text[:HEAT_CELLS]
    place_text = {v: i for i, v in enumerate(distinct_text)}
    return Cells(distinct_text, [place_text.get(c) for c in cells])


def shade(value: float, low: float, high: float) -> str:
    """The colour of a value on the scale from ``low`` to ``high``, as ``#rrggbb``."""
    where = 0.5 if high == low else (value - low) / (high - low)
    where = min(1.0, max(0.0, where)) * (len(VIRIDIS) - 1)
    index = min(len(VIRIDIS) - 2, int(where))
    part = where - index
    mixed = (
        round(a + (b - a) * part) for a, b in zip(VIRIDIS[index], VIRIDIS[index + 1], strict=True)
    )
    return "#" + "".join(f"{c:02x}" for c in mixed)


def category_ticks(across: list[str], down: list[str], cell_w: float, cell_h: float) -> list[str]:
    """Labels of a heat map's categories, at most about ten per axis."""
    parts = []
    for index in range(0, len(across), max(1, math.ceil(len(across) / 8))):
        x = LEFT + (index + 0.5) * cell_w
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
            f"{escape(short(across[index]))}</text>"
        )
    for index in range(0, len(down), max(1, math.ceil(len(down) / 10))):
        y = HEIGHT - BOTTOM - (index + 0.5) * cell_h
        parts.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(short(down[index]))}</text>"
        )
    return parts


def colour_bar(low: float, high: float, left: float, name: str) -> str:
    """The heat map's scale: a column of its colours from ``low`` (bottom) to ``high``."""
    steps, top, height = 20, TOP + 20, HEIGHT - BOTTOM - TOP - 20
    parts = [
        f'<g class="colour-bar"><text class="axis" x="{left + 8:.0f}" y="{TOP + 4}">mean '
        f"{escape(short(name))}</text>"
    ]
    for step in range(steps):
        value = low + (high - low) * (steps - 1 - step) / (steps - 1)
        y = top + step * height / steps
        parts.append(
            f'<rect x="{left + 8:.0f}" y="{y:.1f}" width="16" height="{height / steps + 0.3:.1f}" '
            f'fill="{shade(value, low, high)}"/>'
        )
    parts.append(
        f'<text class="tick" x="{left + 30:.0f}" y="{top + 8}">{figure(high)}</text>'
        f'<text class="tick" x="{left + 30:.0f}" y="{top + height:.0f}">{figure(low)}</text></g>'
    )
    return "".join(parts)


# Axes and frame


@dataclass(frozen=True)
class Axis:
    """A numeric axis: its ticks, and the pixels of its first and last."""

    ticks: list[float]
    start: float
    end: float

    @classmethod
    def of(cls, values: list[float], start: float, end: float) -> Axis:
        return cls(nice_ticks(min(values), max(values)), start, end)

    def __call__(self, value: float) -> float:
        low, high = self.ticks[0], self.ticks[-1]
        return self.start + (self.end - self.start) * (value - low) / (high - low)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round ticks from at most ``low`` to at least ``high``: steps of 1, 2, 2.5 or 5 times a
    power of ten. A range too narrow for floats to split is widened around its middle."""
    raw = high / count - low / count
    if not raw > 1e-300:
        pad = max(abs(low) * 0.1, 1.0)
        low, high = low - pad, high + pad
        raw = high / count - low / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(s * power for s in (1, 2, 2.5, 5, 10) if raw <= s * power)
    first, last = math.floor(low / step), math.ceil(high / step)
    first -= first * step > low  # the division rounded past the end
    last += last * step < high
    return [k * step for k in range(first, max(last, first + 1) + 1)]


def frame(x_axis: Axis, y_axis: Axis, width: float, x_name: str, y_name: str) -> list[str]:
    """The grid, the ticks and the names of a numeric plot's axes."""
    parts = []
    for tick in y_axis.ticks:
        y = y_axis(tick)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{width - 16:.0f}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{figure(tick)}</text>"
        )
    for tick in x_axis.ticks:
        x = x_axis(tick)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
            f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
            f"{figure(tick)}</text>"
        )
    return parts + axis_names(width, x_name, y_name)


def axis_names(width: float, x_name: str, y_name: str) -> list[str]:
    middle = TOP + (HEIGHT - BOTTOM - TOP) / 2
    return [
        f'<text class="axis" data-axis="x" x="{LEFT + (width - 16 - LEFT) / 2:.0f}" '
        f'y="{HEIGHT - 8}" text-anchor="middle">{escape(x_name)}</text>',
        f'<text class="axis" data-axis="y" x="14" y="{middle:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {middle:.0f})">{escape(y_name)}</text>',
    ]


def svg_open(label: str, choice: Choice, series: int) -> str:
    return (
        f'<svg class="chart results-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)}" data-kind="{escape(choice.kind)}" '
        f'data-x="{escape(choice.x)}" data-y="{escape(choice.y)}" '
        f'data-colour="{escape(choice.colour)}" data-series-count="{series}">'
    )


def empty_svg(why: str) -> SafeString:
    return mark_safe(  # noqa: S308 - escaped text only
        f'<svg class="chart results-chart" viewBox="0 0 {WIDTH} 60" role="img" '
        f'aria-label="{escape(why)}" data-series-count="0"><text class="axis" x="{LEFT}" '
        f'y="34">{escape(why)}</text></svg>'
    )


def plotted(values: list[float | None]) -> list[float | None]:
    """The values that have a place on an axis (numbers no larger than ``PLOTTABLE``), the
    others as no value."""
    return [v if v is not None and abs(v) <= PLOTTABLE else None for v in values]


def figure(value: float) -> str:
    """A number as a tick or a tooltip shows it: four significant digits."""
    return f"{value:.4g}"


def short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
