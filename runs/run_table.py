"""The rows of the dashboard's runs table, written here rather than by the template engine.

A table of 25 runs places about 400 values; the template engine's cost per placement was
most of the table's rendering. The values are formatted and escaped once (the id, the name
and the owner, which users choose) or made of digits and a state's name, and the row's
markup below is filled in with them.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from runs.models import RunState
from runs.templatetags.simrun import duration, percent

ROW = (
    '<tr data-run="{id}">'
    '<td><a class="strong" href="{base}{id}/">{name}</a>'
    '<div class="muted mono small">{id}</div></td>'
    '<td><span class="badge state-{state}">{state}</span></td>'
    '<td><div class="progress-wrap"><div class="progress" role="progressbar" '
    'aria-valuemin="0" aria-valuemax="{total}" aria-valuenow="{done}">'
    '<div class="bar state-{state}" style="width: {width:.1f}%"></div></div>'
    '<span class="progress-label">{done}&thinsp;/&thinsp;{total}</span></div></td>'
    '<td class="nowrap">{duration}</td>'
    "<td>{owner}</td>"
    '<td class="nowrap">{created}</td>'
    "</tr>"
)


def table_row(run: dict[str, Any], zone: tzinfo, base: str) -> SafeString:
    """The row of a run as the API lists it; ``base`` is the runs' pages' URL prefix."""
    done, total = int(run["units_done"]), int(run["units_total"])
    created = datetime.fromisoformat(run["created_at"]).astimezone(zone)
    row = ROW.format(
        id=escape(run["id"]),
        base=base,
        name=escape(run["name"] or run["id"]),
        state=RunState(run["state"]).value,
        done=done,
        total=total,
        width=percent(done, total),
        duration=duration(run["duration_s"]),
        owner=escape(run["owner"]),
        created=created.strftime("%Y-%m-%d %H:%M"),
    )
    return mark_safe(row)  # noqa: S308 - every value above is escaped or digits and a state
