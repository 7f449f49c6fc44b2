"""The frame of a results chart: its size, its numeric axes and grid, the SVG around it.

Both kinds of chart draw into the same box; every value they place into the markup is a number
or escaped text, and numbers past ``PLOTTABLE`` have no place on an axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from runs.web.chart_choice import Choice

LABEL_CHARS = 18
PLOTTABLE = 1e300
"""Numbers beyond this are left out of a plot, as no value: its axes' arithmetic stays finite."""
WIDTH = 760
HEIGHT = 330
LEFT = 64
TOP = 16
BOTTOM = 44
LEGEND_W = 150


@dataclass
class Plot:
    """A drawn plot: its SVG, and what it left out in words."""

    svg: SafeString
    notes: list[str] = field(default_factory=list)


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
