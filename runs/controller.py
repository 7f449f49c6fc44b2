"""The controller: follows the workflows of the runs and records their end (spec/000)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from runs.models import Run, RunState


class Conflict(Exception):
    """The run changed meanwhile or has ended."""


def request_cancel(run: Run) -> None:
    """Write a run cancelled (the terminal record first), then hand the backend calls to settle.

    Raises ``Conflict`` when the run ended or changed meanwhile.
    """
    if run.ended:
        raise Conflict(f"run {run.id} has ended ({run.state})")
    written = Run.objects.write_if_unchanged(
        run,
        state=RunState.CANCELLED,
        message="cancelled by the user",
        ended_at=timezone.now(),
        pending_cancel=bool(run.workflow),
        pending_release=bool(run.reserved_node),
        pending_logs=bool(run.workflow),
    )
    if not written:
        raise Conflict(f"run {run.id} changed meanwhile; try again")
    from runs.tasks import settle

    transaction.on_commit(lambda: settle.delay(run.id))
