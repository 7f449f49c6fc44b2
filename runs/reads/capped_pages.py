"""Pages whose count stops at a cap, so a list stays fast on a long history.

A page-number paginator that counts every row a filter matches pays, with 100,000 runs, more
for the count than for the page. Here the count stops at ``COUNT_CAP`` (``count_exact`` says
whether it did) and whether a next page follows comes from reading one row more than the
page. The count reads the rows in the list's order, so it walks the same index as the page
instead of the table. The API's paginator and the pages both read their pages so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections
from django.db.models import QuerySet

COUNT_CAP = 1000
MAX_PAGE = 100_000
"""The last page number a list answers: past it a number is no page."""
Rows = TypeVar("Rows", bound=QuerySet[Any])


def positive(raw: str | None, default: int, maximum: int) -> int | None:
    """A query parameter as an integer in 1..maximum (``default`` when absent), else None."""
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > 9:
        return None
    value = int(raw)
    return value if 1 <= value <= maximum else None


def capped_count(queryset: QuerySet[Any]) -> int:
    """The rows of ``queryset`` counted up to ``COUNT_CAP + 1``, in its order.

    In its order, so the count walks the index the page does; the SQL is counted as it is
    rather than through ``count()``, whose aggregation costs more to build than the query.
    """
    sql, params = queryset.values("pk")[: COUNT_CAP + 1].query.sql_with_params()
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM ({sql}) capped", params)
        (count,) = cursor.fetchone()
    return int(count)


@dataclass(frozen=True)
class Page:
    """One page of rows, whether another follows, and the rows counted up to the cap."""

    rows: list[Any]
    number: int
    has_next: bool
    count: int
    count_exact: bool


def page_of(
    queryset: Rows, number: int, size: int, read: Callable[[Rows], Iterable[Any]] = iter
) -> Page:
    """Page ``number`` (from 1) of ``size`` rows: one query, and a capped count when needed.

    ``read`` turns the page's slice of ``queryset`` into its rows (columns added, say);
    the count is of ``queryset`` itself, without them.
    """
    start = (number - 1) * size
    rows = list(read(queryset[start : start + size + 1]))
    has_next = len(rows) > size
    # Without a next page the rows seen give the count; else count, but only up to the cap.
    count = capped_count(queryset) if has_next else start + min(len(rows), size)
    return Page(rows[:size], number, has_next, min(count, COUNT_CAP), count <= COUNT_CAP)
