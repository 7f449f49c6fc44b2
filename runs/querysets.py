"""The live-run rule and the queries of runs: what the control loop follows, who sees what,
and the compare-and-set write every change of a run goes through."""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from runs.choices import ENDED_STATES, FINAL_TASK_STATES, TaskKind

if TYPE_CHECKING:
    from runs.models import Run


PENDING_AFTER_END = ("pending_logs", "pending_release", "pending_cancel")
"""What a run may still have to do after its end: keep its logs, release its node, cancel."""

LIVE = functools.reduce(
    operator.or_, (Q(**{flag: True}) for flag in PENDING_AFTER_END), Q(ended_at__isnull=True)
)
"""The live-run rule (docs/design.md): a run the control loop follows is not ended (its
``ended_at`` is set exactly when its state is an ended one), or has something pending after
its end. ``Liveness`` is its Python form, ``runs.reads.listed_json`` its SQL."""


POLL_WATCHED = (Q(state__in=FINAL_TASK_STATES) & Q(logs_kept=False)) | (
    Q(kind=TaskKind.SPLIT) & ~Q(state__in=FINAL_TASK_STATES)
)
"""The tasks every reconcile pass reads of the live runs (``runs.control.poll_memory``): final
ones whose logs are not kept (their run is polled) and unfinished split ones (their progress
is watched). A partial index of ``Task`` holds them, so a pass scans no settled run's."""


WAITS = Q(reconcile_failures__gt=0) | ~Q(merge_pending={}) | ~Q(reports_pending={})
"""A live run that waits for something in time (a merge marker, a report within its grace, a
reconcile that crashed): every pass polls it (``runs.control.poll_memory``). A partial index
of ``Run`` holds those, so a pass finds them without scanning the others."""


class Liveness:
    """``ended`` and ``live`` of anything with a run's state and pending flags (a model, a
    listed row), by the live-run rule."""

    __slots__ = ()
    state: str

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def live(self) -> bool:
        return not self.ended or any(getattr(self, flag) for flag in PENDING_AFTER_END)


LISTED = ["id", "name"]
"""What the runs list's indexes carry besides their keys: what it matches, and the name."""


class RunQuerySet(models.QuerySet["Run"]):
    def live(self) -> RunQuerySet:
        """Runs the control loop follows: not ended, or with logs, release or cancel pending."""
        return self.filter(LIVE)

    def settled(self) -> RunQuerySet:
        """Runs the control loop is done with: ended, nothing pending."""
        return self.exclude(LIVE)

    def ended(self) -> RunQuerySet:
        return self.filter(state__in=ENDED_STATES)

    def visible_to(self, user: Any) -> RunQuerySet:
        """The runs a user may see: their own, every run for staff."""
        return self if user.is_staff else self.filter(owner=user)

    def write_if_unchanged(self, run: Run, **changes: Any) -> bool:
        """``UPDATE … WHERE version = n``: write ``changes`` when ``run`` is unchanged.

        On success the instance gets the changes and its new version; returns whether the
        row was written (not when another writer changed the run or it is gone).
        """
        changes["updated_at"] = timezone.now()
        written = self.filter(pk=run.pk, version=run.version).update(
            version=F("version") + 1, **changes
        )
        if written:
            for field, value in changes.items():
                setattr(run, field, value)
            run.version += 1
        return bool(written)
