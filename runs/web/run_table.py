"""The rows of the dashboard's runs table, written here rather than by the template engine.

A table of 25 runs places about 400 values; the template engine's cost per placement was
most of the table's rendering. The values are formatted and escaped once (the id, the name
and the owner, which users choose) or made of digits and a state's name, and the row's
markup below is filled in with them. A row is a function of the run's JSON text alone (and
of the zone and the links' prefix): an ended run's text is the same at every list, so its
row is kept by it, decoded and written once per process.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, tzinfo
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from runs.models import ENDED_STATES, RunState
from runs.templatetags.simrun import duration, percent

ROWS_KEPT = 5_000  # ended runs' rows kept per process: 200 tables, about 5 MB

ROW = (
    '<tr data-run="{id}">'
    '<td class="pick"><input type="checkbox" name="runs" value="{id}" form="compare-runs" '
    'aria-label="compare {id}"></td>'
    '<td><a class="strong" href="{base}{id}/">{name}</a>'
    '<div class="muted mono small">{id}</div></td>'
    '<td><span class="badge state-{state}">{state}</span></td>'
    '<td><div class="progress-wrap"><div class="progress" role="progressbar" '
    'aria-valuemin="0" aria-valuemax="{total}" aria-valuenow="{done}">'
    '<div class="bar state-{state}" style="width: {width:.1f}%"></div></div>'
    '<span class="progress-label">{done}&thinsp;/&thinsp;{total}</span>{failed}</div></td>'
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
        failed=failed_badge(int(run.get("units_failed") or 0)),
        duration=duration(run["duration_s"]),
        owner=escape(run["owner"]),
        created=created.strftime("%Y-%m-%d %H:%M"),
    )
    return mark_safe(row)  # noqa: S308 - every value above is escaped or digits and a state


def failed_badge(failed: int) -> str:
    """The count of a run's failed units beside its progress; nothing when none failed."""
    if not failed:
        return ""
    return (
        f'<span class="badge state-failed units-failed" data-units-failed="{failed}" '
        f'title="units that failed (allowed by failures.allowed)">{failed} failed</span>'
    )


RowKey = tuple[str, tzinfo, str]


class EndedRows:
    """The rows of ended runs by their JSON text, zone and links' prefix, the most recently
    used kept: a live run's text changes with its duration, an ended run's does not."""

    def __init__(self, size: int) -> None:
        self._rows: OrderedDict[RowKey, SafeString] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: RowKey) -> SafeString | None:
        with self._lock:
            row = self._rows.get(key)
            if row is not None:
                self._rows.move_to_end(key)
            return row

    def put(self, key: RowKey, row: SafeString) -> None:
        with self._lock:
            self._rows[key] = row
            self._rows.move_to_end(key)
            while len(self._rows) > self._size:
                self._rows.popitem(last=False)

    def __len__(self) -> int:
        return len(self._rows)


ENDED = EndedRows(ROWS_KEPT)


def table_rows(texts: Iterable[str], zone: tzinfo, base: str) -> tuple[SafeString, bool]:
    """The rows of runs as the API lists them (their JSON texts), one after the other, and
    whether any of them is live (not ended): an ended run's row as kept, the others written
    anew."""
    rows: list[str] = []
    live = False
    for text in texts:
        key = (text, zone, base)
        if (row := ENDED.get(key)) is None:
            run = json.loads(text)
            row = table_row(run, zone, base)
            if run["state"] in ENDED_STATES:
                ENDED.put(key, row)
            else:
                live = True
        rows.append(row)
    return mark_safe("\n".join(rows)), live  # noqa: S308 - rows that table_row wrote
