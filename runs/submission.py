"""Run submission: a validated spec and an owner become a Run with planned Tasks.

The rows and the store files (``run.json``, ``tasks/<task>/task.json``) are written in one
transaction; after it commits the run is handed to the submission task (``runs.tasks``),
which resolves the image, reserves a node and creates the workflow.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from harness.tasktypes import TaskType, task_types
from runs import store
from runs.backends import get_backend
from runs.backends.base import Backend
from runs.models import Observation, Run, Task, TaskKind
from runs.planner import ObservedPeak, TaskPlan, plan_task
from runs.records import task_json
from runs.spec import RunSpec, SpecError, task_kind

OBSERVATIONS_USED = 50
"""The latest observations of a task type the planner looks at."""


def observed_peaks(type_names: set[str]) -> dict[str, list[ObservedPeak]]:
    """The latest observations of some task types, newest first, as the planner reads them."""
    peaks: dict[str, list[ObservedPeak]] = {}
    for name in sorted(type_names):
        rows = Observation.objects.filter(task_type=name).order_by("-created_at")[
            :OBSERVATIONS_USED
        ]
        peaks[name] = [
            ObservedPeak(gb_per_process=gb, oom=o.oom)
            for o in rows
            if (gb := o.peak_gb_per_process) is not None
        ]
    return peaks


def plan_run(
    spec: RunSpec,
    *,
    types: Mapping[str, TaskType],
    backend: Backend,
    observed: Mapping[str, list[ObservedPeak]],
) -> dict[str, TaskPlan]:
    """The plan of every task of a validated spec."""
    return {
        task_id: plan_task(
            task,
            types.get(task.type) if task.type else None,
            observed.get(task.type or "", []),
            extra_workers=backend.extra_workers,
            max_cores=backend.max_cores,
            max_memory_gb=backend.max_memory_gb,
        )
        for task_id, task in spec.tasks.items()
    }


def check_sources(spec: RunSpec, owner: AbstractBaseUser) -> None:
    """Every snapshot a spec names must be one the owner uploaded."""
    known = set(
        owner.snapshots.filter(digest__in=spec.sources).values_list("digest", flat=True)  # type: ignore[attr-defined]
    )
    errors = {
        f"sources.{i}": [f"unknown snapshot {digest!r}: upload it first"]
        for i, digest in enumerate(spec.sources)
        if digest not in known
    }
    if errors:
        raise SpecError(errors)


@transaction.atomic
def create_run(*, spec: RunSpec, owner: AbstractBaseUser, backend: Backend | None = None) -> Run:
    """Create a run and its planned tasks, write their store files, submit after commit."""
    from runs.tasks import submit_run  # the Celery task; imported here to keep the seam thin

    types = task_types()
    backend = backend or get_backend()
    check_sources(spec, owner)
    used = {t.type for t in spec.tasks.values() if t.type}
    plans = plan_run(spec, types=types, backend=backend, observed=observed_peaks(used))
    run = Run.objects.create(
        owner=owner,
        name=spec.name,
        spec=spec.dump(),
        backend=backend.name,
        image=spec.environment.image or "",
        local_commands=spec.commands or "",
        memory_enforced=backend.enforces_memory,
    )
    tasks = []
    for position, (task_id, task) in enumerate(spec.tasks.items()):
        kind = task_kind(task, types)
        task_type = types.get(task.type) if task.type else None
        settings = (
            task_type.parse_settings(task.settings).model_dump(mode="json") if task_type else {}
        )
        units = 1
        if kind == TaskKind.SPLIT and task_type is not None and task_type.units is not None:
            units = task_type.units(task_type.parse_settings(settings))
        tasks.append(
            Task(
                run=run,
                task_id=task_id,
                kind=kind,
                type=task.type or "",
                settings=settings,
                inputs=task.inputs,
                command=task.command or [],
                image=task.image or "",
                plan=plans[task_id].model_dump(mode="json"),
                units_total=units,
                position=position,
            )
        )
    Task.objects.bulk_create(tasks)
    store.write_json(store.run_dir(run.id) / "run.json", {"id": run.id, **run.spec})
    for task in tasks:
        store.write_json(store.task_dir(run.id, task.task_id) / "task.json", task_json(task))
    transaction.on_commit(lambda: submit_run.delay(run.id))
    return run
