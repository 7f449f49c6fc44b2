"""Run submission: a validated spec and an owner become a Run with planned Tasks.

The rows and the store files (``run.json``, ``tasks/<task>/task.json``) are written in one
transaction; after it commits the run is handed on to its submission (the controller's
``Schedule``: the Celery task in the service), which resolves the image, reserves a node and
creates the workflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from harness.tasktypes import TaskType, task_types
from runs.backends import cluster_config, get_backend
from runs.backends.base import Backend, TaskPlan, TaskRecord
from runs.common import store
from runs.common.errors import CannotRun, QueueFull
from runs.common.handoff import Schedule, after_commit, learner, scheduler
from runs.models import (
    ENDED_STATES,
    RUN_ID_LENGTH,
    Observation,
    Reuse,
    Run,
    RunState,
    Task,
    TaskKind,
)
from runs.planning import images
from runs.planning.evidence import prior_evidence
from runs.planning.images import resolve
from runs.planning.installable import not_installable
from runs.planning.keys import Environment, task_keys
from runs.planning.learned_types import MustLearn, run_types
from runs.planning.peak_model import features_of
from runs.planning.planner import (
    OBSERVATIONS_USED,
    ObservedPeak,
    observation_keys,
    oversized,
    plan_run,
)
from runs.planning.programs import named_files
from runs.planning.records import owner_login, spec_record, task_json, task_records
from runs.planning.resume import Chosen, cached, check_resumable, not_resumed, resumed
from runs.planning.spec import RunSpec, SpecError, cached_tasks, type_name, validate_spec


def observed_peaks(
    type_names: set[str], owner_id: int | None = None
) -> dict[str, list[ObservedPeak]]:
    """The latest observations of some task types as the planner reads them, newest first:
    with ``owner_id``, of a type that owner has observations of, only theirs (one user's runs
    of a program never decide another's plan); of another type, everyone's.

    Two queries at most however many types. On PostgreSQL each type's latest are read from
    its index (a lateral top-N), so the cost never grows with the history; elsewhere (the
    embedded SQLite) a window ranks them.
    """
    names = sorted(type_names)
    own = _peaks(_latest_observations(names, owner_id)) if owner_id is not None else {}
    everyone = _peaks(_latest_observations([n for n in names if n not in own]))
    return {**everyone, **own}


def _peaks(rows: Iterable[Observation]) -> dict[str, list[ObservedPeak]]:
    peaks: dict[str, list[ObservedPeak]] = {}
    for row in rows:
        gb = row.peak_gb_per_process
        if gb is not None:
            at = row.created_at.timestamp()
            features = features_of(row.features) if isinstance(row.features, dict) else ()
            peaks.setdefault(row.task_type, []).append(
                ObservedPeak(gb, oom=row.oom, at=at, features=features)
            )
    return peaks


def _latest_observations(
    type_names: list[str], owner_id: int | None = None
) -> Iterable[Observation]:
    """The latest ``OBSERVATIONS_USED`` observations of each type (of ``owner_id``'s runs
    only, when given), by type, newest first."""
    if connection.vendor == "postgresql":
        if owner_id is None:
            return Observation.objects.raw(LATEST_OBSERVATIONS, [type_names])
        return Observation.objects.raw(LATEST_OWN_OBSERVATIONS, [type_names, owner_id])
    return latest_by_window(type_names, owner_id)


def latest_by_window(type_names: list[str], owner_id: int | None = None) -> Iterable[Observation]:
    """What ``_latest_observations`` gives, ranked by a window: any database."""
    found = Observation.objects.filter(task_type__in=type_names)
    if owner_id is not None:
        found = found.filter(run__owner_id=owner_id)
    return (
        found.annotate(
            rank=Window(RowNumber(), partition_by=[F("task_type")], order_by=F("created_at").desc())
        )
        .filter(rank__lte=OBSERVATIONS_USED)
        .order_by("task_type", "rank")
    )


def _latest_observations_sql(*, own: bool = False) -> str:
    table = Observation._meta.db_table
    runs = Run._meta.db_table
    mine = f' AND "run_id" IN (SELECT "id" FROM "{runs}" WHERE "owner_id" = %s)' if own else ""
    return (
        f"SELECT latest.* FROM unnest(%s::text[]) WITH ORDINALITY AS wanted(task_type, n) "
        f'CROSS JOIN LATERAL (SELECT * FROM "{table}" '
        f'WHERE "task_type" = wanted.task_type{mine} ORDER BY "created_at" DESC '
        f"LIMIT {OBSERVATIONS_USED}) latest "
        f'ORDER BY wanted.n, latest."created_at" DESC'
    )


LATEST_OBSERVATIONS = _latest_observations_sql()
LATEST_OWN_OBSERVATIONS = _latest_observations_sql(own=True)


def units_of(record: TaskRecord, types: Mapping[str, TaskType]) -> int:
    """The units of a split task (1 for any other), counted by its type from its settings."""
    task_type = types.get(record.type)
    if record.kind != TaskKind.SPLIT or task_type is None or task_type.units is None:
        return 1
    return task_type.units(task_type.parse_settings(record.settings))


def check_sources(spec: RunSpec, owner: User) -> None:
    """Every snapshot a spec names must be one the owner uploaded, and a tree pip can install
    as far as its files tell (``not_installable``)."""
    known = set(owner.snapshots.filter(digest__in=spec.sources).values_list("digest", flat=True))
    errors = {}
    for i, digest in enumerate(spec.sources):
        if digest not in known:
            errors[f"sources.{i}"] = [f"unknown snapshot {digest!r}: upload it first"]
        elif problem := not_installable(digest):
            errors[f"sources.{i}"] = [f"snapshot {digest[:12]}: {problem}"]
    if errors:
        raise SpecError(errors)


def check_queue(owner: User) -> None:
    """Refuse a new run of ``owner`` past ``SIMRUN_USER_QUEUED_RUNS`` runs not ended; in the
    transaction that creates it, the owner's row locked, so two submissions cannot both pass."""
    User.objects.select_for_update().filter(pk=owner.pk).first()
    bound = settings.SIMRUN_USER_QUEUED_RUNS
    if Run.objects.filter(owner=owner).exclude(state__in=ENDED_STATES).count() >= bound:
        raise QueueFull(
            f"you have {bound} runs that have not ended, the most this service queues for one "
            f"user (SIMRUN_USER_QUEUED_RUNS): wait for some to end, or cancel some"
        )


def run_problem(spec: RunSpec, owner: User, backend: Backend) -> str | None:
    """Why this service cannot start the tasks of a spec of ``owner``, None if it can: the
    local backend's task user may not reach what a task needs (``isolation_problem``)."""
    problem_of = backend.isolation_problem
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
    return f"this service can start {what} of yours: {problem}"


def create_run(
    *,
    spec: RunSpec,
    owner: User,
    backend: Backend | None = None,
    schedule: Schedule | None = None,
    rerun_of: Run | None = None,
    resume: bool = False,
    text: str = "",
    submitted_by: User | None = None,
) -> Run:
    """Create a run (a re-run of ``rerun_of``, if given, reusing what it finished with
    ``resume``: ``runs.planning.resume``) and its planned tasks, write their store files,
    submit after commit. ``text`` is the spec as the user wrote it, kept for Edit and re-run;
    ``submitted_by`` who submitted it for ``owner`` (staff re-running it).

    A type only the run's sources define is known from what was learned of them before
    (``run_types``); if their code must run to learn it, the run is made ``learning``, without
    tasks, and handed to the worker (``plan_learned``): an install of sources takes seconds or
    minutes, never a web request's. The submission is handed on with ``schedule`` (the
    service's: the Celery task). ``CannotRun`` when the service could start none of it,
    ``QueueFull`` when the owner has ``SIMRUN_USER_QUEUED_RUNS`` runs not ended.
    """
    if resume and rerun_of is not None:
        check_resumable(rerun_of, owner.pk)
    backend = backend or get_backend()
    if problem := run_problem(spec, owner, backend):
        raise CannotRun(problem)
    check_sources(spec, owner)
    try:
        learned, types = run_types(spec, owner.pk, run_code=False)
    except MustLearn:
        fields = _run_fields(spec, owner, backend, rerun_of, text, submitted_by, resume)
        return _learning_run(fields)
    fields = _run_fields(learned, owner, backend, rerun_of, text, submitted_by, resume)
    held = images_held(learned, backend)
    return _create_run(
        spec=learned, types=types, fields=fields, backend=backend, schedule=schedule, held=held
    )


LEARNING_MESSAGE = (
    "learning the task types its sources ship: installing them and asking them, as the "
    "owner's task user, in the worker"
)


def _run_fields(
    spec: RunSpec,
    owner: User,
    backend: Backend,
    rerun_of: Run | None,
    text: str,
    submitted_by: User | None,
    resume: bool,
) -> dict[str, Any]:
    """The fields of a new run of ``spec``."""
    return {
        "submitted_by": submitted_by,
        "owner": owner,
        "name": spec.name,
        "spec": spec.dump(),
        "spec_text": text,
        "backend": backend.name,
        "image": spec.environment.image or "",
        "local_commands": spec.commands or "",
        "memory_enforced": backend.enforces_memory,
        "rerun_of": rerun_of,
        "resume": resume,
    }


@transaction.atomic
def _learning_run(fields: dict[str, Any]) -> Run:
    """A run that waits, without tasks, for the worker to learn its sources' types."""
    check_queue(fields["owner"])
    run = Run.objects.create(**fields, state=RunState.LEARNING, message=LEARNING_MESSAGE)
    learn = learner()
    after_commit(lambda: learn(run.id), f"the learning of run {run.id}")
    return run


def plan_learned(
    run: Run, *, backend: Backend | None = None, schedule: Schedule | None = None
) -> bool:
    """Learn the types a ``learning`` run's sources ship (their code runs: the worker's work),
    then plan its tasks and hand it on as any submission; False when it was no longer learning
    (cancelled meanwhile). ``SpecError`` or ``CannotRun`` when it cannot run, saying why."""
    backend = backend or get_backend()
    spec = validate_spec(run.spec, types=task_types())
    spec, types = run_types(spec, run.owner_id)
    held = images_held(spec, backend)
    return _plan_learning_run(
        run, spec=spec, types=types, backend=backend, schedule=schedule, held=held
    )


def images_held(spec: RunSpec, backend: Backend) -> dict[str, str]:
    """What the images the tasks of ``spec`` run in hold (``images.identities``), part of
    their keys; asked before the run's transaction, as a registry may take seconds."""
    ran_in = [task.image or spec.environment.image or "" for task in spec.tasks.values()]
    return images.identities(ran_in, backend)


@transaction.atomic
def _plan_learning_run(
    run: Run,
    *,
    spec: RunSpec,
    types: Mapping[str, TaskType],
    backend: Backend,
    schedule: Schedule | None,
    held: Mapping[str, str],
) -> bool:
    """``plan_learned`` once the types are known: the tasks, and the run ``submitting``."""
    schedule = schedule or scheduler()
    locked = Run.objects.select_for_update().filter(pk=run.pk, state=RunState.LEARNING).first()
    if locked is None:
        return False
    plans = _plans(spec, types, backend, run.owner_id)
    Run.objects.filter(pk=run.pk).update(
        state=RunState.SUBMITTING,
        spec=spec.dump(),
        message="",
        version=F("version") + 1,
        updated_at=timezone.now(),
    )
    locked.spec = spec.dump()
    _write_tasks(locked, spec, types, plans, held)
    after_commit(lambda: schedule(run.id), f"the submission of run {run.id}")
    return True


@transaction.atomic
def _create_run(
    *,
    spec: RunSpec,
    types: Mapping[str, TaskType],
    fields: dict[str, Any],
    backend: Backend,
    schedule: Schedule | None,
    held: Mapping[str, str],
) -> Run:
    """``create_run`` once the types are known: the rows, the store files, the hand-on."""
    schedule = schedule or scheduler()
    check_queue(fields["owner"])
    plans = _plans(spec, types, backend, fields["owner"].pk)
    run = Run.objects.create(**fields)
    _write_tasks(run, spec, types, plans, held)
    after_commit(lambda: schedule(run.id), f"the submission of run {run.id}")
    return run


def _plans(
    spec: RunSpec, types: Mapping[str, TaskType], backend: Backend, owner_id: int | None
) -> dict[str, TaskPlan]:
    """The plan of every task of a spec of ``owner_id`` on ``backend``; ``SpecError`` for one
    it cannot hold."""
    if spec.reserve_node and not backend.reserves_nodes:
        message = backend.no_reservations or (
            f"the {backend.name} backend has no nodes to reserve: submit without it"
        )
        raise SpecError({"reserve_node": [message]})
    # What caps a pod: the machine, the largest node, or (Argo) the queue's quota for one pod.
    largest = backend.largest_node
    too_large = oversized(
        spec,
        types=types,
        max_cores=backend.max_cores,
        max_memory_gb=backend.max_memory_gb,
        largest=largest,
    )
    if too_large:
        raise SpecError(too_large)
    used = {key for key in observation_keys(spec).values() if key}
    plans = plan_run(
        spec,
        types=types,
        observed=observed_peaks(used, owner_id),
        evidence=prior_evidence(types),
        extra_workers=backend.extra_workers,
        max_cores=backend.max_cores,
        max_memory_gb=backend.max_memory_gb,
        largest=largest,
    )
    if refused := _refusal(spec, types, plans, backend, owner_id):
        raise SpecError({"tasks": [refused]})
    return plans


def _refusal(
    spec: RunSpec,
    types: Mapping[str, TaskType],
    plans: dict[str, TaskPlan],
    backend: Backend,
    owner_id: int | None,
) -> str | None:
    """Why the backend would refuse this run of ``owner_id`` whatever its cluster's state
    (a user without the Unix login its jobs must run as, say), asked before the run is
    accepted; a run id of the length every run has stands for the one to come."""
    cluster = cluster_config()
    record = spec_record(
        spec,
        types,
        run_id="a" * RUN_ID_LENGTH,
        image=resolve(spec.environment.model_dump(), cluster).image,
        reserved_node="",
        store=store.root(),
        owner=owner_id,
        login=owner_login(owner_id),
    )
    return backend.refusal(record, plans, dict(types), cluster)


def reused(
    run: Run,
    spec: RunSpec,
    records: Mapping[str, TaskRecord],
    keys: Mapping[str, str],
    files: Mapping[str, Mapping[str, str]],
) -> tuple[dict[str, Chosen], dict[str, str]]:
    """What each task of a new run reuses, by task id: of the run it resumes, then, for the
    tasks with ``cache`` it gives nothing to, of the newest same task of its owner's runs; and
    why the tasks of the run resumed whose key changed are not reused."""
    chosen: dict[str, Chosen] = {}
    refused: dict[str, str] = {}
    if run.resume and run.rerun_of is not None:
        kinds = {task_id: record.kind for task_id, record in records.items()}
        chosen = resumed(keys=keys, kinds=kinds, source=run.rerun_of, owner_id=run.owner_id)
    if wanted := {t: keys[t] for t in cached_tasks(spec) if t not in chosen}:
        chosen |= cached(keys=wanted, owner_id=run.owner_id)
    if run.resume and run.rerun_of is not None:
        refused = not_resumed(
            chosen=chosen, keys=keys, records=records, files=files, source=run.rerun_of
        )
    return chosen, refused


def _write_tasks(
    run: Run,
    spec: RunSpec,
    types: Mapping[str, TaskType],
    plans: Mapping[str, TaskPlan],
    held: Mapping[str, str],
) -> None:
    """The tasks of a run, each with its key and what it reuses (``reused``), and its store
    files (``run.json``, each ``task.json``). What a task's programs, files and image hold
    (``named_files``; ``held``, of ``images_held``) is part of its key."""
    records = task_records(spec, types)
    files = named_files(records)
    for task_id, record in records.items():
        name = f"{images.IMAGE_KEY}{record.image or spec.environment.image or ''}"
        if name in held:
            files[task_id][name] = held[name]
    keys = task_keys(records, Environment.of(spec), files)
    chosen, refused = reused(run, spec, records, keys, files)
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
            named_files=files[task_id],
            reuse=chosen[task_id].how if task_id in chosen else Reuse.NONE,
            reused_from=chosen[task_id].reused_from if task_id in chosen else "",
            not_reused=refused.get(task_id, ""),
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
