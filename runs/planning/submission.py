"""Run submission: a validated spec and an owner become a Run with planned Tasks.

The rows and the store files (``run.json``, ``tasks/<task>/task.json``) are written in one
transaction; after it commits the run is handed on to its submission (the controller's
``Schedule``: the Celery task in the service), which resolves the image, reserves a node and
creates the workflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from harness.tasktypes import TaskType
from runs.backends import get_backend
from runs.backends.base import Backend, TaskRecord
from runs.common import store
from runs.common.handoff import Schedule, after_commit, scheduler
from runs.models import Observation, Run, Task, TaskKind
from runs.planning.evidence import prior_evidence
from runs.planning.keys import Environment, task_keys
from runs.planning.learned_types import run_types
from runs.planning.planner import (
    OBSERVATIONS_USED,
    ObservedPeak,
    observation_keys,
    oversized,
    plan_run,
)
from runs.planning.records import task_json, task_records
from runs.planning.spec import RunSpec, SpecError, type_name


def observed_peaks(type_names: set[str]) -> dict[str, list[ObservedPeak]]:
    """The latest observations of some task types as the planner reads them, newest first.

    One query however many types. On PostgreSQL each type's latest ``OBSERVATIONS_USED`` are
    read from its index (a lateral top-N): a window over every observation of a type read
    them all, at each submission, a cost that grew with the history. Elsewhere (the
    embedded SQLite) the window ranks them.
    """
    peaks: dict[str, list[ObservedPeak]] = {}
    for row in _latest_observations(sorted(type_names)):
        gb = row.peak_gb_per_process
        if gb is not None:
            at = row.created_at.timestamp()
            peaks.setdefault(row.task_type, []).append(ObservedPeak(gb, oom=row.oom, at=at))
    return peaks


def _latest_observations(type_names: list[str]) -> Iterable[Observation]:
    """The latest ``OBSERVATIONS_USED`` observations of each type, by type, newest first."""
    if connection.vendor == "postgresql":
        return Observation.objects.raw(LATEST_OBSERVATIONS, [type_names])
    return latest_by_window(type_names)


def latest_by_window(type_names: list[str]) -> Iterable[Observation]:
    """What ``_latest_observations`` gives, ranked by a window: any database."""
    return (
        Observation.objects.filter(task_type__in=type_names)
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("task_type")], order_by=F("created_at").desc())
        )
        .filter(rank__lte=OBSERVATIONS_USED)
        .order_by("task_type", "rank")
    )


def _latest_observations_sql() -> str:
    table = Observation._meta.db_table
    return (
        f"SELECT latest.* FROM unnest(%s::text[]) WITH ORDINALITY AS wanted(task_type, n) "
        f'CROSS JOIN LATERAL (SELECT * FROM "{table}" '
        f'WHERE "task_type" = wanted.task_type ORDER BY "created_at" DESC '
        f"LIMIT {OBSERVATIONS_USED}) latest "
        f'ORDER BY wanted.n, latest."created_at" DESC'
    )


LATEST_OBSERVATIONS = _latest_observations_sql()


def units_of(record: TaskRecord, types: Mapping[str, TaskType]) -> int:
    """The units of a split task (1 for any other), counted by its type from its settings."""
    task_type = types.get(record.type)
    if record.kind != TaskKind.SPLIT or task_type is None or task_type.units is None:
        return 1
    return task_type.units(task_type.parse_settings(record.settings))


def check_sources(spec: RunSpec, owner: User) -> None:
    """Every snapshot a spec names must be one the owner uploaded."""
    known = set(owner.snapshots.filter(digest__in=spec.sources).values_list("digest", flat=True))
    errors = {
        f"sources.{i}": [f"unknown snapshot {digest!r}: upload it first"]
        for i, digest in enumerate(spec.sources)
        if digest not in known
    }
    if errors:
        raise SpecError(errors)


class CannotRun(Exception):
    """This service cannot run such a run as it is set up (not a fault of the spec): refused
    at once, a 503 naming the fix, rather than accepted to fail every task."""


def run_problem(spec: RunSpec, owner: User, backend: Backend) -> str | None:
    """Why this service cannot start the tasks of a spec of ``owner``, None if it can: the
    local backend's task user may not reach what a task needs (``isolation_problem``)."""
    problem_of = getattr(backend, "isolation_problem", None)
    if problem_of is None:
        return None
    # A typed task (split or plugin, a command sweep too) runs this Python as the task user;
    # so does a run with sources or packages, whose venvs are built (and types learned) as
    # that user.
    built = bool(spec.sources or spec.environment.packages)
    typed = built or any(type_name(t) is not None for t in spec.tasks.values())
    if problem := problem_of(owner.pk, "command"):
        what = "no task"
    elif typed and (problem := problem_of(owner.pk, "split")):
        what = "no split or plugin task, nor a run with sources or packages,"
    else:
        return None
    return (
        f"this service can start {what} of yours: {problem} "
        "(`simrun serve --tasks-as-service` does that; docs/team.md)"
    )


def create_run(
    *,
    spec: RunSpec,
    owner: User,
    backend: Backend | None = None,
    schedule: Schedule | None = None,
    rerun_of: Run | None = None,
    text: str = "",
) -> Run:
    """Create a run (a re-run of ``rerun_of``, if given) and its planned tasks, write their
    store files, submit after commit. ``text`` is the spec as the user wrote it, kept for
    Edit and re-run.

    A type only the run's sources define is learned from them first (``run_types``), before
    the transaction: an install of the sources takes seconds, and SQLite's transactions hold
    the write lock from their start. The submission is handed on with ``schedule`` (the
    service's: the Celery task). ``CannotRun`` when the service could start none of it.
    """
    backend = backend or get_backend()
    if problem := run_problem(spec, owner, backend):
        raise CannotRun(problem)
    check_sources(spec, owner)
    spec, types = run_types(spec, owner.pk)
    return _create_run(
        spec=spec,
        types=types,
        owner=owner,
        backend=backend,
        schedule=schedule,
        rerun_of=rerun_of,
        text=text,
    )


@transaction.atomic
def _create_run(
    *,
    spec: RunSpec,
    types: Mapping[str, TaskType],
    owner: User,
    backend: Backend | None,
    schedule: Schedule | None,
    rerun_of: Run | None,
    text: str = "",
) -> Run:
    """``create_run`` once the types are known: the rows, the store files, the hand-on."""
    schedule = schedule or scheduler()
    backend = backend or get_backend()
    if spec.reserve_node and not backend.reserves_nodes:
        message = f"the {backend.name} backend has no nodes to reserve: submit without it"
        raise SpecError({"reserve_node": [message]})
    too_large = oversized(
        spec,
        types=types,
        max_cores=backend.max_cores,
        max_memory_gb=backend.max_memory_gb,
        largest="this machine" if backend.name == "local" else "the largest node",
    )
    if too_large:
        raise SpecError(too_large)
    used = {key for key in observation_keys(spec).values() if key}
    plans = plan_run(
        spec,
        types=types,
        observed=observed_peaks(used),
        evidence=prior_evidence(types),
        extra_workers=backend.extra_workers,
        max_cores=backend.max_cores,
        max_memory_gb=backend.max_memory_gb,
    )
    run = Run.objects.create(
        owner=owner,
        name=spec.name,
        spec=spec.dump(),
        spec_text=text,
        backend=backend.name,
        image=spec.environment.image or "",
        local_commands=spec.commands or "",
        memory_enforced=backend.enforces_memory,
        rerun_of=rerun_of,
    )
    records = task_records(spec, types)
    keys = task_keys(records, Environment.of(spec))
    tasks = [
        Task(
            run=run,
            task_id=task_id,
            kind=record.kind,
            type=record.type,
            settings=record.settings,
            inputs=record.inputs,
            command=record.command,
            image=record.image,
            key=keys[task_id],
            plan=plans[task_id].model_dump(mode="json"),
            units_total=units_of(record, types),
            position=position,
        )
        for position, (task_id, record) in enumerate(records.items())
    ]
    Task.objects.bulk_create(tasks)
    store.write_json(store.run_dir(run.id) / "run.json", {"id": run.id, **run.spec})
    for task in tasks:
        store.write_json(store.task_dir(run.id, task.task_id) / "task.json", task_json(task))
    after_commit(lambda: schedule(run.id), f"the submission of run {run.id}")
    return run
