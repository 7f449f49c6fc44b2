"""Conversions between the database rows of a run and what backends and the harness read."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from django.conf import settings

from harness.tasktypes import TaskType
from runs.backends.base import RunRecord, TaskPlan, TaskRecord
from runs.models import Run, Task
from runs.planning.spec import RunSpec, sweep_settings, task_kind, type_name


def run_record(run: Run, tasks: list[Task] | None = None) -> RunRecord:
    """The run as a backend sees it."""
    rows = tasks if tasks is not None else list(run.tasks.all())
    return RunRecord(
        id=run.id,
        name=run.name,
        image=run.image,
        reserved_node=run.reserved_node,
        local_commands=run.local_commands,
        sources=list(run.spec.get("sources", [])),
        packages=list(run.spec.get("environment", {}).get("packages", [])),
        tasks={
            t.task_id: TaskRecord(
                id=t.task_id,
                kind=t.kind,
                type=t.type,
                settings=t.settings,
                inputs=t.inputs,
                command=t.command,
                image=t.image,
            )
            for t in rows
        },
        store=settings.SIMRUN_STORE,
        created_at=run.created_at.timestamp(),
        owner=run.owner_id,
        reused=[t.task_id for t in rows if t.reused_whole],
    )


def task_plans(tasks: list[Task]) -> dict[str, TaskPlan]:
    """The plans of the tasks by id; a plan written before ``coordinator_merges`` reads False."""
    return {t.task_id: TaskPlan.model_validate(t.plan) for t in tasks}


def task_json(task: Task) -> dict[str, object]:
    """The ``task.json`` of a task: what the harness reads besides its environment."""
    return {
        "run": task.run_id,
        "task": task.task_id,
        "kind": task.kind,
        "type": task.type,
        "settings": task.settings,
        "inputs": task.inputs,
        "command": task.command,
        "plan": task.plan,
        "units": task.units_total,
    }


def task_records(spec: RunSpec, types: Mapping[str, TaskType]) -> dict[str, TaskRecord]:
    """The tasks of a validated spec as they are stored: kind resolved, settings normalised."""
    records = {}
    for task_id, task in spec.tasks.items():
        task_type = types[task.type] if task.type else None
        if task.sweep is not None:
            settings = sweep_settings(task)
        elif task_type is not None:
            settings = task_type.parse_settings(task.settings).model_dump(mode="json")
        else:
            settings = {}
        records[task_id] = TaskRecord(
            id=task_id,
            kind=task_kind(task, types),
            type=type_name(task) or "",
            settings=settings,
            inputs=task.inputs,
            command=task.command or [],
            image=task.image or "",
        )
    return records


def spec_record(
    spec: RunSpec,
    types: Mapping[str, TaskType],
    *,
    run_id: str,
    image: str,
    reserved_node: str,
    store: Path,
) -> RunRecord:
    """The record a validated spec would become, without a database (render-workflow)."""
    return RunRecord(
        id=run_id,
        name=spec.name,
        image=image,
        reserved_node=reserved_node,
        local_commands=spec.commands or "",
        sources=spec.sources,
        tasks=task_records(spec, types),
        store=store,
    )
