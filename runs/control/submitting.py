"""Submitting a run: its image, its node, its workflow; resumed after a stopped process."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from harness.tasktypes import task_types
from runs.backends import cluster_config, get_backend
from runs.backends.base import Backend, BackendUnavailable, ClusterConfig, workflow_name
from runs.common.handoff import Schedule
from runs.control import locks, reuse
from runs.control.backoff import push_aside, submission_grace
from runs.control.closing import close_run
from runs.control.settling import settle_run
from runs.control.waking import wake
from runs.models import Run, RunState, Task
from runs.planning import images
from runs.planning.records import run_record, task_plans

log = logging.getLogger(__name__)


SUBMISSION_TRIES = 8
"""The times the loop hands on a submission that stopped before it fails the run."""


class SubmissionError(Exception):
    """A step of a submission failed; the message is the one of the failed run."""


class _Abandoned(Exception):
    """The run ended (it was cancelled) while its submission ran."""


def submit(run_id: str, *, backend: Backend | None = None) -> bool:
    """Submit a run left submitting: resolve and build its image, reserve a node, submit.

    Idempotent, so a submission resumes after a killed process (``recover``): an image that
    was built is found, a node reserved for the run is kept, a workflow that exists is taken
    as submitted. One process at a time submits a run: False when another one does (its
    lock is held), True otherwise. A failure fails the run and cancels a workflow that may
    exist; a run cancelled meanwhile ends with no live workflow.
    """
    backend = backend or get_backend()
    with locks.hold(f"submit-{run_id}") as held:
        if not held:
            return False
        run = Run.objects.filter(pk=run_id).first()
        if run is not None and run.state == RunState.SUBMITTING:
            _submit(run, backend)
    return True


def _submit(run: Run, backend: Backend) -> None:
    """Submit a run; what failed is failed, or left submitting for the loop to hand on again.

    The backend unavailable and the database failing are left to the loop
    (``resume_submission``); any other failure fails the run and cancels the workflow by its
    name, since a process before this one may have created it.
    """
    tasks = list(run.tasks.order_by("position"))
    may_exist = run.workflow or workflow_name(run.id)
    try:
        cluster = cluster_config()
        if not reuse.copy_reused(run, tasks, backend=backend):
            raise _Abandoned
        if all(task.reused_whole for task in tasks):
            close_run(run, tasks, RunState.SUCCEEDED, "")  # nothing left to run
            return
        run = _prepare(run, tasks, backend, cluster)
        name = backend.submit(run_record(run, tasks), task_plans(tasks), task_types(), cluster)
    except _Abandoned:
        _abandon(run.id, may_exist, backend)
        return
    except BackendUnavailable as error:
        log.warning("submitting run %s: %s; the loop hands it on again", run.id, error)
        return
    except DatabaseError:
        raise
    except ValueError as error:  # refused now; a submission before may have created one
        _fail_submission(run.id, str(error), _made_before(may_exist, backend), backend)
        return
    except Exception as error:
        log.exception("submitting run %s failed", run.id)
        message = (
            str(error) if isinstance(error, SubmissionError) else f"submission failed: {error}"
        )
        _fail_submission(run.id, message, may_exist, backend)
        return
    if _write_submitting(run, state=RunState.RUNNING, workflow=name, submitted_at=timezone.now()):
        wake()
    else:
        _abandon(run.id, name, backend)


def _made_before(name: str, backend: Backend) -> str:
    """The workflow a refused submission must cancel: the one of this name if a process
    before made it (a resumed submission refused once the node sizes are known), else none.

    The backend is asked for it (``status``), not its cache of versions: a process just
    started has seen no workflow yet, and one made before must still be cancelled. A backend
    that cannot tell gets the name: an unknown workflow counts as cancelled."""
    try:
        backend.status(name)
    except KeyError:
        return ""
    except Exception:  # noqa: BLE001 - cancelling a workflow that is not there costs nothing
        log.warning("cannot tell whether workflow %s exists; it is cancelled", name)
    return name


def _prepare(run: Run, tasks: list[Task], backend: Backend, cluster: ClusterConfig) -> Run:
    """The image and the node of a run, written into its record before the submission."""
    if backend.runs_images:
        environment = images.resolve(run.spec.get("environment", {}), cluster)
        if environment.digest is not None and not backend.has_image(environment.image):
            context = images.write_context(environment)
            try:
                backend.build_image(context, environment.image)
            except BackendUnavailable:
                raise
            except Exception as error:
                raise SubmissionError(
                    f"building the image {environment.image} failed: {error}"
                ) from error
        if environment.image != run.image and not _write_submitting(run, image=environment.image):
            raise _Abandoned
    if run.spec.get("reserve_node"):
        run = _free_node(run, tasks, backend)
    fresh = Run.objects.filter(pk=run.pk).first()
    if fresh is None or fresh.state != RunState.SUBMITTING:
        raise _Abandoned
    return fresh


def _free_node(run: Run, tasks: list[Task], backend: Backend) -> Run:
    """Reserve a node for the run: the one its record names (a resumed submission), else the
    smallest free one that fits its largest task (``choose_node``); a node another run took
    meanwhile is passed over for the next."""
    taken: set[str] = set()
    for _ in range(RESERVE_TRIES):
        node = run.reserved_node if run.reserved_node not in taken else ""
        if not node:
            try:
                node = backend.choose_node(task_plans(tasks), taken=taken)
            except LookupError as error:
                raise SubmissionError(str(error)) from None
        if node != run.reserved_node and not _write_submitting(run, reserved_node=node):
            raise _Abandoned
        try:
            backend.reserve(node, run.id)
        except ValueError:
            taken.add(node)  # another run holds it
            continue
        holder = next((n.reserved_by for n in backend.nodes() if n.name == node), None)
        if holder == run.id:
            return run
        taken.add(node)
    raise SubmissionError(f"other runs took {len(taken)} free nodes first; submit it again")


RESERVE_TRIES = 5
"""Nodes tried when other runs reserve the chosen one first."""


def _write_submitting(run: Run, **changes: Any) -> bool:
    """Write a submitting run, compare-and-set, re-reading it on a conflict.

    False when it is no longer submitting (it was cancelled meanwhile).
    """
    while True:
        if run.state != RunState.SUBMITTING:
            return False
        if Run.objects.write_if_unchanged(run, **changes):
            return True
        try:
            run.refresh_from_db()
        except Run.DoesNotExist:
            return False


def resume_submission(run: Run, now: datetime, *, schedule: Schedule, backend: Backend) -> None:
    """Hand on a submission that stopped; fail it after ``SUBMISSION_TRIES``.

    A submission stops when its process died, the database failed after the backend accepted
    the workflow, or the backend was unavailable. One that is running (its lock is held) is
    left alone, and a new run for two polls, the time its first submission takes to start.
    Each hand-on pushes the run aside for a short, capped while (``push_aside``).
    """
    if run.reconcile_after is None and now - run.created_at < submission_grace():
        return
    if locks.held(f"submit-{run.id}"):
        return
    if run.reconcile_failures >= SUBMISSION_TRIES:
        message = f"the submission did not complete after {SUBMISSION_TRIES} tries"
        _fail_submission(run.id, message, run.workflow or workflow_name(run.id), backend)
        return
    log.info("the submission of run %s stopped; it is handed on again", run.id)
    push_aside(run, now, unavailable=True)
    try:
        schedule(run.id)
    except Exception:  # the broker: the next hand-on is as soon as for an unavailable backend
        log.exception("cannot hand on the submission of run %s", run.id)


def _fail_submission(run_id: str, message: str, workflow: str, backend: Backend) -> None:
    """Fail a run whose submission failed; a workflow that may exist is cancelled."""
    while True:
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            return
        if run.state != RunState.SUBMITTING:
            _abandon(run_id, workflow, backend)
            return
        tasks = list(run.tasks.all())
        if close_run(run, tasks, RunState.FAILED, message, workflow=workflow):
            settle_run(run, tasks, backend=backend)
            return


def _abandon(run_id: str, workflow: str, backend: Backend) -> None:
    """A run that ended while it was submitted: cancel the workflow created, release the node."""
    for _ in range(5):
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            return
        changes: dict[str, Any] = {}
        if workflow and run.workflow != workflow:
            changes.update(workflow=workflow, pending_cancel=True, pending_logs=True)
        if run.reserved_node and not run.pending_release:
            changes["pending_release"] = True
        if not changes or Run.objects.write_if_unchanged(run, **changes):
            settle_run(run, list(run.tasks.all()), backend=backend)
            return
    log.error("run %s kept changing while its submission was abandoned", run_id)
