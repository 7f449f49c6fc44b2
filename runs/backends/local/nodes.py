"""The nodes of a run's workflow on the local backend, made from its tasks and their plans.

A node has the name of its Argo workflow's (``<task>-w0`` for the coordinator of a split task,
``<task>`` for an unsplit one), runs after the nodes of the tasks it reads from, and runs a
command of this machine (``simrun-worker``, ``simrun-exec`` or the task's command) or, with
``commands: docker``, the task's command in its image.
"""

from __future__ import annotations

import subprocess

from harness.tasktypes import TaskType
from runs.backends.base import RunRecord, TaskPlan, TaskRecord
from runs.backends.local.state import NodeSpec


def node_name(task: TaskRecord) -> str:
    """The node of a task in the workflow: its coordinator for a split task."""
    return f"{task.id}-w0" if task.kind == "split" else task.id


def docker_problem() -> str | None:
    """Why no Docker engine can run a container here, None when one answers."""
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except FileNotFoundError:
        return "docker is not installed"
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 10 s"
    if done.returncode != 0:
        return (done.stderr or done.stdout).strip() or f"docker version exited {done.returncode}"
    return None


def nodes(
    record: RunRecord, plans: dict[str, TaskPlan], types: dict[str, TaskType], commands: str
) -> list[NodeSpec]:
    """The nodes of a run's workflow, but for its reused tasks; ValueError when a task reads
    from a task the run does not have, has a type that is unknown or neither splittable nor
    has a command, or runs in an image and no Docker engine answers."""
    in_docker = [t for t in record.tasks.values() if t.kind == "command" and commands == "docker"]
    if in_docker and (problem := docker_problem()):
        raise ValueError(f"commands: docker, but no Docker engine can run them: {problem}")
    return [
        node(record, task, plans[task.id], types, commands)
        for task in record.tasks.values()
        if task.id not in record.reused
    ]


def node(
    record: RunRecord,
    task: TaskRecord,
    plan: TaskPlan,
    types: dict[str, TaskType],
    commands: str,
) -> NodeSpec:
    """The node of a task: what it runs (``commands``: ``direct`` or ``docker``) and after
    which nodes."""
    for port, source in task.inputs.items():
        if source not in record.tasks:
            raise ValueError(f"task {task.id}: input {port} reads {source!r}, no task of the run")
    inputs = {port: f"runs/{record.id}/tasks/{source}/out" for port, source in task.inputs.items()}
    name = node_name(task)
    env = {
        "SIMRUN_TASK_DIR": str(record.task_dir(task.id)),
        "SIMRUN_STORE": str(record.store),
        "SIMRUN_INPUTS": ",".join(f"{port}={path}" for port, path in inputs.items()),
        "SIMRUN_CORES": str(plan.cores),
        "SIMRUN_WORKER": name if task.kind == "split" else task.id,
    }
    argv: list[str] = []
    command: list[str] = []
    image = ""
    stage: list[tuple[str, str]] = []
    if task.kind in {"split", "plugin"}:
        task_type = types.get(task.type)
        if task_type is None:
            raise ValueError(f"task {task.id}: unknown task type {task.type!r}")
        if task.kind == "split":
            if not task_type.splittable:
                raise ValueError(f"task {task.id}: task type {task.type!r} is not splittable")
            argv = ["simrun-worker"]
            env["SIMRUN_ROLE"] = "base"
        elif task_type.command is None:
            raise ValueError(f"task {task.id}: task type {task.type!r} has no command")
        else:
            argv = ["simrun-exec", *task_type.command(task_type.parse_settings(task.settings))]
    else:
        if not task.command:
            raise ValueError(f"task {task.id}: a command task needs a command")
        env["SIMRUN_OUT"] = str(record.task_dir(task.id) / "out")
        stage = [(path, f"inputs/{port}") for port, path in inputs.items()]
        if commands == "docker":
            image = task.image or record.image
            if not image:
                raise ValueError(f"task {task.id}: commands: docker needs an image")
            command = list(task.command)
        else:
            argv = list(task.command)
    return NodeSpec(
        name=name,
        task=task.id,
        worker=env["SIMRUN_WORKER"],
        kind=task.kind,
        after=[
            node_name(record.tasks[source])
            for source in task.inputs.values()
            if source not in record.reused
        ],
        argv=argv,
        command=command,
        image=image,
        env=env,
        stage=stage,
        cores=plan.cores,
        memory_gb=plan.memory_gb,
        retry_memory_gb=plan.retry_memory_gb,
    )
