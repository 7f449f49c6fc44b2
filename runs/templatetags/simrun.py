"""Template filters of the dashboard: durations, sizes, percentages."""

from __future__ import annotations

import json
import shlex
from collections.abc import Hashable
from typing import Any

from django import template
from django.template.loader import render_to_string
from django.urls import get_script_prefix
from django.utils.safestring import SafeString

from runs.common.kept import Kept
from runs.models import Task
from runs.reads.shown import shown_state

register = template.Library()

PARTS: Kept[SafeString] = Kept(256)
"""The parts of every page ``kept`` rendered: each (template, values) pair there is."""


@register.simple_tag
def kept(template_name: str, **values: Hashable) -> SafeString:
    """``template_name`` rendered with ``values`` alone, once per process and site prefix:
    for the parts of the layout that depend on nothing else (its links and assets), which
    ``{% url %}`` and ``{% static %}`` would otherwise work out again at every page."""
    key = (template_name, get_script_prefix(), *sorted(values.items()))
    return PARTS.get(key, lambda: render_to_string(template_name, values))


@register.filter
def duration(seconds: float | None) -> str:
    """``42s``, ``3m 05s``, ``2h 04m``, ``3d 2h``."""
    if seconds is None:
        return "–"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@register.filter
def filesize(size: int | None) -> str:
    """``512 B``, ``3.4 KiB``, ``12.0 MiB``."""
    if size is None:
        return "–"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


@register.filter
def percent(done: int | float | None, total: int | float | None) -> float:
    """``done`` of ``total`` in percent, 0 when there is no total."""
    if not total or done is None:
        return 0.0
    return round(min(100.0, 100.0 * float(done) / float(total)), 1)


@register.filter
def gib(value: float | None) -> str:
    """A memory figure in GiB, as short as it can be read."""
    if value is None:
        return "–"
    return f"{value:.2f}".rstrip("0").rstrip(".") + " GiB"


@register.filter
def pretty_json(value: object) -> str:
    """A value as indented JSON, for a ``<pre>``."""
    return json.dumps(value, indent=2, sort_keys=False)


@register.filter
def ratio(value: float | None, by: float | None) -> str:
    """``value / by`` in three significant digits, ``–`` when ``by`` is zero."""
    if not by or value is None:
        return "–"
    return f"{value / by:.3g}"


@register.filter
def shell(args: list[str] | None) -> str:
    """A command's args as a shell would take them back (``shlex.join``): quotes kept."""
    return shlex.join(args or [])


SECONDS_BELOW_GBH = 0.01
"""Figures of memory × time below this many GiB·h read better in GiB·s."""


@register.filter
def gbh_unit(value: float | None, other: float | None = None) -> str:
    """The unit of a table of memory × time figures, by the larger of two of its largest
    (used and wasted): ``s`` or ``h``, so a column never mixes GiB·s and GiB·h."""
    largest = max(abs(value or 0), abs(other or 0))
    return "s" if largest < SECONDS_BELOW_GBH else "h"


@register.filter
def usage_unit(usages: Any) -> str:
    """The one unit (``s`` or ``h``) of the memory × time figures of some memory use: a
    ``Usage``, or a list of them, of weeks (``.usage``) or of ``(task type, usage)`` pairs; by
    the largest figure shown (used, wasted, VPA's wasted), so a table or a sentence keeps one."""
    found = [usages] if hasattr(usages, "wastage") else list(usages or [])
    largest = 0.0
    for item in found:
        usage = item[-1] if isinstance(item, tuple) else getattr(item, "usage", item)
        vpa = usage.counterfactual.get("vpa")
        figures = (usage.wastage.used_gbh, usage.wastage.wasted_gbh, vpa.wasted_gbh if vpa else 0)
        largest = max(largest, *map(abs, figures))
    return gbh_unit(largest)


@register.filter
def gbh(value: float | None, unit: str = "") -> str:
    """Memory × time in GiB·h (``unit`` ``h``), GiB·s (``s``) or, without one, whichever the
    figure reads better in, with the digits a small figure needs."""
    if value is None:
        return "–"
    unit = unit or gbh_unit(value)
    if value == 0:
        return f"0 GiB·{unit}"
    if unit == "s":
        return f"{value * 3600:.3g} GiB·s"  # a short run's figures read better in seconds
    digits = 2 if abs(value) >= 1 else 4
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") + " GiB·h"


@register.filter
def get(mapping: dict[str, object] | None, key: str) -> object:
    """``mapping[key]``, None when either is missing: templates cannot index by a variable."""
    return None if mapping is None else mapping.get(key)


@register.filter
def minus(value: float | None, other: float | None) -> float | None:
    """``value − other``, None when either is missing."""
    return None if value is None or other is None else value - other


@register.filter
def task_state(task: Task) -> str:
    """What a task's badge says: its state, or "stopped: run cancelled" (``shown_state``)."""
    return shown_state(
        task.state,
        task.reused_run if task.reused_whole else "",
        stopped_by=task.stopped_by,
    )


@register.filter
def state_class(shown: str) -> str:
    """The state a badge is coloured as: ``stopped`` of "stopped: run cancelled", ``reused``
    of "reused from <run>"."""
    if shown.startswith("reused from "):
        return "reused"
    return shown.split(":", 1)[0]
