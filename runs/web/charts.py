"""Charts the server draws as SVG: the memory of a task type's workers against their sizing.

Every value placed into the markup is a number or escaped text, so the SVG can be put inline
into a page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from runs.models import Observation

WIDTH = 720
HEIGHT = 260
LEFT = 56
RIGHT = 16
TOP = 16
BOTTOM = 36


def _nice_ceiling(value: float) -> float:
    """A round upper bound of an axis: 1, 2, 2.5 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def observation_chart(observations: Sequence[Observation], planned_gb: float) -> SafeString:
    """Peak GiB per process of each observation (oldest first) against the GiB it was sized with.

    Dots are peaks measured by a report, crosses kills for memory, hollow dots kills observed
    at their limit (no report); a grey dash is the sizing of each, the dashed line the figure
    a new task would be planned with now.
    """
    points = [(o, o.peak_gb_per_process) for o in observations]
    values = [v for _, v in points if v is not None] + [o.per_worker_gb for o in observations]
    top = _nice_ceiling(max([planned_gb, *values]) * 1.1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(points))

    def y(gb: float) -> float:
        return TOP + plot_h * (1 - min(gb, top) / top)

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="peak memory per process against the planned memory">'
    ]
    for i in range(5):
        gb = top * i / 4
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(gb):.1f}" '
            f'y2="{y(gb):.1f}"/><text class="tick" x="{LEFT - 6}" y="{y(gb) + 4:.1f}" '
            f'text-anchor="end">{gb:.3g}</text>'
        )
    parts.append(
        f'<text class="axis" x="14" y="{TOP + plot_h / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})">GiB per process</text>'
        f'<text class="axis" x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 6}" '
        f'text-anchor="middle">observations, oldest to newest</text>'
    )
    for index, (observation, peak) in enumerate(points):
        cx = LEFT + step * (index + 0.5)
        sized = y(observation.per_worker_gb)
        parts.append(
            f'<line class="sized" x1="{cx - 5:.1f}" x2="{cx + 5:.1f}" '
            f'y1="{sized:.1f}" y2="{sized:.1f}"/>'
        )
        if peak is None:
            continue
        label = escape(
            f"{observation.worker} attempt {observation.attempt}: peak {peak:.3f} GiB, "
            f"sized {observation.per_worker_gb:.3f} GiB"
            + (" (killed for memory)" if observation.oom else "")
        )
        cy = y(peak)
        if observation.oom and observation.from_report:
            parts.append(
                f'<path class="point oom" d="M{cx - 4:.1f},{cy - 4:.1f} l8,8 m0,-8 l-8,8">'
                f"<title>{label}</title></path>"
            )
        else:
            kind = "point oom limit" if observation.oom else "point"
            parts.append(
                f'<circle class="{kind}" cx="{cx:.1f}" cy="{cy:.1f}" r="3.5">'
                f"<title>{label}</title></circle>"
            )
    planned = y(planned_gb)
    parts.append(
        f'<line class="planned" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{planned:.1f}" '
        f'y2="{planned:.1f}"><title>planned now: {planned_gb:.3f} GiB per process</title></line>'
        "</svg>"
    )
    return mark_safe("".join(parts))  # noqa: S308 - numbers and escaped text only
