"""Which runs a list shows: those its viewer may see, narrowed by validated filters.

The SQL of them is a function of who sees (every run, or one owner's) and of the filters'
values alone, so each process compiles and quotes it once for each: the ORM building,
compiling and quoting it cost a tenth of a list's Python, a fifth with filters.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.db import connections, router

from runs.common.prepared import with_literals
from runs.models import Run, RunQuerySet
from runs.reads.run_filters import apply_filters

KEPT = 2048  # the SQL of as many listings kept per process


@dataclass(frozen=True)
class Listing:
    """The runs of a list: every run (``owner_id`` None: staff) or an owner's, filtered."""

    owner_id: int | None
    filters: tuple[tuple[str, Hashable], ...]
    alias: str

    @classmethod
    def of(cls, user: Any, values: Mapping[str, Any]) -> Listing:
        """The runs ``user`` may see (their own, every run for staff) that ``values``, the
        validated filters, match."""
        frozen = tuple(sorted((key, frozen_value(value)) for key, value in values.items()))
        return cls(None if user.is_staff else user.pk, frozen, router.db_for_read(Run))

    @property
    def by_name(self) -> bool:
        """Whether the runs are filtered by a part of their name."""
        return bool(dict(self.filters).get("name"))

    def runs(self) -> RunQuerySet:
        runs = Run.objects.using(self.alias).all()
        if self.owner_id is not None:
            runs = runs.filter(owner_id=self.owner_id)
        return apply_filters(runs, dict(self.filters))


def frozen_value(value: Any) -> Hashable:
    """A filter's value as a key: a set of states as a frozenset, the others as they are."""
    return frozenset(value) if isinstance(value, set | list) else value


@lru_cache(maxsize=KEPT)
def matched_sql(listing: Listing) -> str:
    """The runs of ``listing`` as a subquery of their ids and creation times, unordered, its
    values written in (``runs.common.prepared``): a statement repeated is prepared with the plan of
    its values."""
    query = listing.runs().values("pk", "created_at").order_by().query
    return with_literals(connections[listing.alias], *query.sql_with_params())
