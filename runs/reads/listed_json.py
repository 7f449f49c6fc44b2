"""The runs list's rows as JSON texts, written by PostgreSQL: the hottest answer, made cheap.

Decoding a page's rows into Python (timestamps above all), building a dict per run and
encoding them again costs more than the rest of the request; PostgreSQL writes each row's
JSON (``listed_document``, the API's ``RunSerializer`` answers it, key for key), the API joins
the page as text and the dashboard's table decodes it. Other databases build the same texts
in Python.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from datetime import datetime, tzinfo
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from runs.common.prepared import prepared_rows
from runs.models import PENDING_AFTER_END, Run, RunQuerySet, Task
from runs.reads.access import ListedRun, listed_rows
from runs.reads.capped_pages import COUNT_CAP, Page, page_of
from runs.reads.listing import KEPT, Listing, matched_sql

RUNS, TASKS = Run._meta.db_table, Task._meta.db_table
SETTLED_KEPT = 20_000  # settled runs' texts kept per process: about 10 MB


def iso(value: datetime | None, zone: tzinfo | None = None) -> str | None:
    """A time as DRF's DateTimeField writes it (current time zone, ``Z`` for UTC), cheaper.

    ``zone`` is the current time zone when the caller has it already (once for a row).
    """
    if value is None:
        return None
    text = value.astimezone(zone or timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def listed_document(run: Run | ListedRun) -> dict[str, Any]:
    """A run as a list shows it, built directly: what the API's ``RunSerializer`` answers
    (its declared fields describe it in the schema) and what ``DOCUMENT`` writes in SQL.

    DRF's field machinery costs tens of microseconds a row, and a list of runs is the API's
    hottest answer; a test compares this dict with the one DRF builds.
    """
    zone = timezone.get_current_timezone()
    return {
        "id": run.id,
        "name": run.name,
        # A listed row has its owner's name; a Run read alone, its owner.
        "owner": getattr(run, "owner_name", None) or run.owner.get_username(),  # type: ignore[union-attr]
        "state": run.state,
        "message": run.message,
        "backend": run.backend,
        "live": run.live,
        "units_done": run.units_done_sum,  # type: ignore[union-attr]
        "units_total": run.units_total_sum,  # type: ignore[union-attr]
        "units_failed": run.units_failed_sum,  # type: ignore[union-attr]
        "duration_s": run.duration_s,
        "created_at": iso(run.created_at, zone),
        "submitted_at": iso(run.submitted_at, zone),
        "ended_at": iso(run.ended_at, zone),
        "rerun_of": run.rerun_of_id,
    }


def _column(name: str) -> str:
    return f'"{RUNS}"."{name}"'


def _iso(name: str) -> str:
    """A timestamp as ``iso()`` writes it in UTC: microseconds only when there are some."""
    column = _column(name)
    return (
        f"to_char({column} AT TIME ZONE 'UTC', CASE WHEN "
        f"EXTRACT(MICROSECONDS FROM {column})::bigint %% 1000000 = 0 "
        """THEN 'YYYY-MM-DD"T"HH24:MI:SS"Z"' ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"' END)"""
    )


def _units(name: str) -> str:
    """A sum over the run's tasks: the document is written in an aggregate of its tasks."""
    return f'COALESCE(SUM("{TASKS}"."{name}"), 0)'


def _live() -> str:
    """The SQL of the live-run rule (``runs.models.LIVE``): not ended, or something pending."""
    pending = " OR ".join(_column(flag) for flag in PENDING_AFTER_END)
    return f"({_column('ended_at')} IS NULL OR {pending})"


def _owner() -> str:
    owners = get_user_model()._meta.db_table
    return f'(SELECT "username" FROM "{owners}" WHERE "id" = {_column("owner_id")})'


def _document() -> str:
    """The SQL of a row's JSON text; its one parameter is the time a live run lasts to."""
    fields = {
        "id": _column("id"),
        "name": _column("name"),
        "owner": _owner(),
        "state": _column("state"),
        "message": _column("message"),
        "backend": _column("backend"),
        "live": _live(),
        "units_done": _units("units_done"),
        "units_total": _units("units_total"),
        "units_failed": _units("units_failed"),
        "duration_s": (
            f"EXTRACT(EPOCH FROM COALESCE({_column('ended_at')}, %s) - {_column('created_at')})"
        ),
        "created_at": _iso("created_at"),
        "submitted_at": _iso("submitted_at"),
        "ended_at": _iso("ended_at"),
        "rerun_of": _column("rerun_of_id"),
    }
    pairs = ", ".join(f"'{key}', {sql}" for key, sql in fields.items())
    # One pass over the run's tasks gives every sum, a fraction of the work of a subquery each.
    tasks = f'FROM "{TASKS}" WHERE "{TASKS}"."run_id" = {_column("id")}'
    return f"(SELECT json_build_object({pairs})::text {tasks})"


DOCUMENT = _document()
# What a settled run's text is written from: the version of its row (the transaction that
# wrote it and where: new at each update, even two in one transaction), its owner's name and
# its tasks' sums. While these are the same, so is the text: a settled run's duration ends.
VERSION = (
    f"{_column('id')}, {_column('xmin')}::text || {_column('ctid')}::text, {_owner()}, "
    f"(SELECT ARRAY[{_units('units_done')}, {_units('units_total')}, {_units('units_failed')}] "
    f'FROM "{TASKS}" '
    f'WHERE "{TASKS}"."run_id" = {_column("id")})'
)
# A settled run's text comes from the cache when its version is there; a live one's always
# from the database (its duration runs on).
CACHED_OR_DOCUMENT = f"CASE WHEN {_live()} THEN {DOCUMENT} END"
Version = tuple[str, str, str, list[int]]


class SettledTexts:
    """The JSON texts of settled runs by version, most recently used kept: a settled run's
    text is written once per process instead of at each list that shows it."""

    def __init__(self, size: int) -> None:
        self._texts: OrderedDict[str, tuple[Version, str]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, version: Version) -> str | None:
        """The text of the run of ``version`` written from that version, if kept."""
        with self._lock:
            kept = self._texts.get(version[0])
            if kept is None or kept[0] != version:
                return None
            self._texts.move_to_end(version[0])
            return kept[1]

    def put(self, version: Version, text: str) -> None:
        with self._lock:
            self._texts[version[0]] = (version, text)
            self._texts.move_to_end(version[0])
            while len(self._texts) > self._size:
                self._texts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._texts)


SETTLED = SettledTexts(SETTLED_KEPT)


def writes_json(alias: str) -> bool:
    """Whether the database ``alias`` writes the rows (PostgreSQL, the times in UTC)."""
    return connections[alias].vendor == "postgresql" and settings.TIME_ZONE == "UTC"


def built_json(runs: RunQuerySet) -> list[str]:
    """Each run's JSON text built in Python from ``listed_rows``: any database."""
    shown = (listed_document(row) for row in listed_rows(runs))
    return [json.dumps(run, ensure_ascii=False, separators=(",", ":")) for run in shown]


@lru_cache(maxsize=KEPT)
def page_sql(listing: Listing, start: int, size: int, reach: int, by_name: bool) -> str:
    """The statement of a page of ``listing`` from its ``start``-th run and of the runs
    counted up to ``reach``; its one parameter is the time a live run's duration runs to,
    which steers no plan."""
    # The runs matched, compiled once for the page and the count, unordered: a plain
    # subquery, which PostgreSQL merges into each, ordered as the list is (Run.Meta.ordering).
    newest = f'FROM ({matched_sql(listing)}) matched ORDER BY "created_at" DESC'
    shown = f"SELECT {VERSION}, {CACHED_OR_DOCUMENT}"
    joined = f'JOIN "{RUNS}" ON {_column("id")} = page."pk" ORDER BY page."created_at" DESC'
    if by_name:
        return (
            f"WITH found AS (SELECT * {newest} LIMIT {reach}), "
            f'page AS (SELECT * FROM found ORDER BY "created_at" DESC LIMIT {size} OFFSET {start}) '
            f"{shown}, (SELECT COUNT(*) FROM found) FROM page {joined}"
        )
    counted = f"SELECT COUNT(*) FROM (SELECT 1 {newest} LIMIT {reach}) counted"
    page = f"SELECT * {newest} LIMIT {size} OFFSET {start}"
    return f"{shown}, ({counted}) FROM ({page}) page {joined}"


def listed_page(
    listing: Listing, number: int, size: int, now: datetime, *, by_name: bool | None = None
) -> Page:
    """Page ``number`` of the runs of ``listing`` (``size`` rows) as each run's JSON text, as
    ``listed_document`` writes it with a live run's duration to ``now``, and the runs counted up
    to the cap, as ``page_of`` gives them.

    On PostgreSQL in one statement, and only the page's rows are read and written. With
    ``by_name`` (by default: when the runs are filtered by a part of their name) the runs
    matched, up to the cap or to the end of the page, are found once for both the count and
    the page: the name's index gives them unordered, to sort once. Otherwise the page and the
    count each walk a list's index from its newest run, which costs less than keeping the
    matched runs to sort again.
    """
    if not writes_json(listing.alias):
        return page_of(listing.runs(), number, size, read=built_json)
    start = (number - 1) * size
    reach = max(COUNT_CAP + 1, start + size + 1)
    connection = connections[listing.alias]
    by_name = listing.by_name if by_name is None else by_name
    sql = page_sql(listing, start, size, reach, by_name)
    found = prepared_rows(connection, sql, [now])
    # The matched runs reach one past the page: more than its end means a next page.
    count = found[0][-1] if found else start
    texts = {row[0]: row[4] or SETTLED.get(row[:4]) for row in found}
    missing = [run_id for run_id, text in texts.items() if text is None]
    if missing:
        texts.update(_written(connection, missing, now))
    rows = [texts[row[0]] for row in found]
    return Page(rows, number, count > start + size, min(count, COUNT_CAP), count <= COUNT_CAP)


def _written(connection: BaseDatabaseWrapper, run_ids: list[str], now: datetime) -> dict[str, str]:
    """The texts of runs ``run_ids`` written by the database; a settled one's kept by its
    version, as read in the same statement."""
    with connection.cursor() as cursor:
        by_id = f"{_column('id')} = ANY(%s)"
        cursor.execute(
            f'SELECT {VERSION}, {_live()}, {DOCUMENT} FROM "{RUNS}" WHERE {by_id}', [now, run_ids]
        )
        rows = cursor.fetchall()
    texts = {}
    for *version, live, text in rows:
        if not live:
            SETTLED.put(tuple(version), text)
        texts[version[0]] = text
    return texts
