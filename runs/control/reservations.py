"""An operator's release of a reserved node: the record first, the backend call in settle.

The web never calls the backend to change anything: releasing marks the ended run holding
the node ``pending_release`` (compare-and-set) and hands it to ``settle``, which unreserves
the node and retries until that succeeds (Ruling 25).
"""

from __future__ import annotations

from runs.common.handoff import after_commit, settler
from runs.models import Run


class ReleaseRefused(Exception):
    """The node cannot be released now; the message says why."""


def holder_of(*, node: str, reserved_by: str | None = None) -> Run | None:
    """The run holding a node: the one the backend names, else the latest that reserved it."""
    if reserved_by:
        run = Run.objects.filter(pk=reserved_by).first()
        if run is not None:
            return run
    return Run.objects.filter(reserved_node=node).order_by("-created_at").first()


def release_reservation(*, run: Run, node: str | None = None) -> Run:
    """Mark the ended ``run`` to release its node (``node`` when the record lost it).

    A live run keeps its node: cancelling it releases the node.
    """
    node = node or run.reserved_node
    if not node:
        raise ReleaseRefused(f"run {run.id} holds no node")
    if not run.ended:
        raise ReleaseRefused(f"run {run.id} is {run.state}: cancel it, which releases its node")
    if not Run.objects.write_if_unchanged(run, pending_release=True, reserved_node=node):
        raise ReleaseRefused(f"run {run.id} changed meanwhile; try again")
    settle = settler()
    after_commit(lambda: settle(run.id), f"the release of run {run.id}'s node")
    return run
