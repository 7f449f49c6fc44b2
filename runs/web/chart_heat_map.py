"""The heat map of a results chart: a cell per (x, colour) pair, coloured by its rows' mean y.

At most ``HEAT_CELLS`` cells a side: more distinct numbers are binned into equal ranges, more
texts cut to the first.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import mark_safe

from runs.reads.results import MISSING, Results
from runs.web.chart_choice import Choice
from runs.web.chart_frame import (
    BOTTOM,
    HEIGHT,
    LEFT,
    LEGEND_W,
    TOP,
    WIDTH,
    Plot,
    axis_names,
    empty_svg,
    figure,
    plotted,
    short,
    svg_open,
)

HEAT_CELLS = 64
"""Cells of a heat map along each axis at most; more distinct numbers are binned."""
VIRIDIS = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
"""The stops of the heat map's colour scale, low to high (perceptually even, colour-blind safe)."""


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
            f"({_rows(int(sums[across, down][1]))})"
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


def _rows(count: int) -> str:
    return "1 row" if count == 1 else f"{count:,} rows"
