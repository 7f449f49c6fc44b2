"""What a results chart plots: the columns on x and y, the colour column and the kind.

The defaults are read from the table (its first numeric parameter on x, its first numeric
result field on y); a query overrides them, and a column that does not fit is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runs.reads.results import Results
from runs.reads.table_views import BadView

KINDS = {"lines": "lines", "heatmap": "heat map"}
MAX_SERIES = 10
"""Lines drawn at most: the palette's colours (``.series-0`` to ``.series-9``)."""


class BadChoice(BadView):
    """A choice of the plot that names no fitting column: ``field`` says which one."""


@dataclass(frozen=True)
class Choice:
    """What to plot: the columns on x and y, the colour column ("" for none) and the kind."""

    x: str
    y: str
    colour: str
    kind: str = "lines"


def default_choice(results: Results) -> Choice | None:
    """The first numeric parameter on x, the first numeric result field on y, and a line per
    value of the next parameter that has a few values (one value is no lines to tell apart);
    None without two numeric columns."""
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
            if c not in (x, y) and 1 < len(set(results.values(c))) <= MAX_SERIES
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
