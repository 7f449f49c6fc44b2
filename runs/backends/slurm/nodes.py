"""The DAG nodes of a run on Slurm, each with what its job runs: a pure function of the run.

As in the Argo workflow: a split task T is its coordinator ``T-w0``, its extra workers
``T-extra(<n-1>:<n>)`` (``SIMRUN_WORKER=T-w<n>``, submitted together as arrays) and
``T-merge`` after the coordinator (none when the coordinator merges); an unsplit task is the
node ``T``. A node waits for the node whose success completes each of its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.tasktypes import TaskType
from runs.backends.base import RunRecord, TaskPlan, TaskRecord
from runs.backends.slurm.script import extra_node
from runs.backends.slurm.state import NodeSpec

STALE_S = 120
"""Seconds after which the coordinator releases the claims of a silent worker."""


def done_node(task_id: str, record: RunRecord, plans: Mapping[str, TaskPlan]) -> str:
    """The node whose success means a task's output is complete."""
    if record.tasks[task_id].kind != "split":
        return task_id
    return f"{task_id}-w0" if plans[task_id].coordinator_merges else f"{task_id}-merge"


def run_nodes(
    record: RunRecord, plans: Mapping[str, TaskPlan], types: Mapping[str, TaskType]
) -> list[NodeSpec]:
    """Every node of a run but those of tasks it reuses; ValueError for a task that cannot run."""
    if missing := sorted(set(record.tasks) - set(plans)):
        raise ValueError(f"no plan for the tasks {', '.join(missing)}")
    found: list[NodeSpec] = []
    for task in record.tasks.values():
        if task.id in record.reused:
            continue
        for port, source in task.inputs.items():
            if source not in record.tasks:
                raise ValueError(
                    f"task {task.id}: input {port} reads {source!r}, no task of the run"
                )
        after = sorted(
            {done_node(s, record, plans) for s in task.inputs.values() if s not in record.reused}
        )
        found += _task_nodes(task, plans[task.id], record, types, after)
    return found


def _env(task: TaskRecord, plan: TaskPlan, record: RunRecord, role: str) -> dict[str, str]:
    inputs = ",".join(
        f"{port}=runs/{record.id}/tasks/{source}/out" for port, source in task.inputs.items()
    )
    return {
        "SIMRUN_STORE": str(record.store),
        "SIMRUN_TASK_DIR": str(record.task_dir(task.id)),
        "SIMRUN_INPUTS": inputs,
        "SIMRUN_ROLE": role,
        "SIMRUN_CORES": str(plan.cores),
        "SIMRUN_STALE_S": str(STALE_S),
        "SIMRUN_EDITABLE": ",".join(str(record.store / "snapshots" / d) for d in record.sources),
    }


def _task_nodes(
    task: TaskRecord,
    plan: TaskPlan,
    record: RunRecord,
    types: Mapping[str, TaskType],
    after: list[str],
) -> list[NodeSpec]:
    def node(name: str, argv: list[str], *, role: str = "base", **fields: object) -> NodeSpec:
        env = _env(task, plan, record, role)
        worker = str(fields.pop("worker", name))
        if fields.pop("sets_worker", True):
            env["SIMRUN_WORKER"] = worker
        env.update(fields.pop("env", {}))  # type: ignore[call-overload]
        return NodeSpec.model_validate(
            {
                "name": name,
                "task": task.id,
                "worker": worker,
                "kind": task.kind,
                "after": after,
                "argv": argv,
                "env": env,
                "cores": plan.cores,
                "memory_gb": plan.memory_gb,
                "retry_memory_gb": plan.retry_memory_gb,
                **fields,
            }
        )

    if task.kind == "split":
        task_type = types.get(task.type)
        if task_type is None or not task_type.splittable:
            raise ValueError(f"task {task.id}: {task.type!r} is no splittable task type")
        nodes = [node(f"{task.id}-w0", ["simrun-worker"])]
        nodes += [
            node(
                extra_node(task.id, n),
                ["simrun-worker"],
                role="extra",
                worker=f"{task.id}-w{n}",
                array=f"{task.id}-extra",
            )
            for n in range(1, plan.workers)
        ]
        if not plan.coordinator_merges:
            merge = node(
                f"{task.id}-merge", ["simrun-merge"], sets_worker=False, env={"SIMRUN_CORES": "1"}
            )
            nodes.append(merge.model_copy(update={"after": [f"{task.id}-w0"], "cores": 1}))
        return nodes
    if task.kind == "plugin":
        task_type = types.get(task.type)
        if task_type is None or task_type.command is None:
            raise ValueError(f"task {task.id}: {task.type!r} is no plugin task type")
        command = task_type.command(task_type.parse_settings(task.settings))
        return [node(task.id, ["simrun-exec", *command])]
    if task.kind != "command":
        raise ValueError(f"task {task.id}: unknown kind {task.kind!r}")
    if not task.command:
        raise ValueError(f"task {task.id}: a command task needs a command")
    if task.image:
        raise ValueError(f"task {task.id}: the slurm backend runs no images (image: {task.image})")
    out = str(record.task_dir(task.id) / "out")
    stage = [(f"runs/{record.id}/tasks/{src}/out", port) for port, src in task.inputs.items()]
    return [node(task.id, list(task.command), env={"SIMRUN_OUT": out}, stage=stage)]
