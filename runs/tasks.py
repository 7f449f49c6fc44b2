"""Celery tasks: thin shells that fetch by id and call one domain function."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="runs.tasks.submit_run")
def submit_run(run_id: str) -> None:
    """Resolve the image, reserve a node if asked and create the workflow of a run."""
    from runs import controller

    controller.submit(run_id)


@shared_task(name="runs.tasks.settle")
def settle(run_id: str | None = None) -> None:
    """Retry the pending logs, release and cancellation of terminal runs (one, or all)."""
    from runs import controller

    controller.settle_pending(run_id)


@shared_task(name="runs.tasks.reconcile")
def reconcile() -> None:
    """Bring the records of the live runs up to date with the backend."""
    from runs import controller

    controller.reconcile()
