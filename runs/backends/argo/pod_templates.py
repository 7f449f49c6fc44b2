"""The pod templates of a run's Workflow: one a kind of pod, shared by every task of the run.

What differs from task to task comes in as the parameters of the DAG task that calls the
template (``arguments``): the task's id, its command, image, cores, memory and retry memory,
its inputs. Argo substitutes ``{{inputs.parameters.*}}`` over the whole template, so they
reach the labels, the environment and the ``podSpecPatch``, which sets the cores, the memory
of each attempt (``retries``) and the command: quantities and lists cannot be parameters of
the container itself, whose schema wants them typed, and Argo applies the patch before it
puts its ``argoexec emissary`` in front of the command (AW ``workflowpod.go``); a patch that
reads both the retry variables and ``inputs.parameters`` needs Argo ≥ 3.7 (AW issue 12941),
which ``versions`` requires already. So a Workflow
costs a DAG task a task, not a template: the templates are as many as the kinds of pod.

The kinds: ``command`` (a command task, in its own image, its inputs staged first),
``plugin`` (a task type's command through ``simrun-exec``), and a split task's ``worker``
(its coordinator ``T-w0``), ``extra`` (its extra workers, fanned out) and ``merge``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.tasktypes import TaskType
from runs.backends.argo.retries import (
    RETRY_BACKOFF,
    RETRY_EXPRESSION,
    memory_quantity,
    retry_memory_patch,
)
from runs.backends.base import RETRY_LIMIT, ClusterConfig, RunRecord, TaskPlan, TaskRecord

COMMAND, PLUGIN, WORKER, EXTRA, MERGE = "command", "plugin", "worker", "extra", "merge"
TASK_LABEL = "simrun/task"
DAG_TASK_LABEL = "simrun/dag-task"
SCRATCH = "/scratch"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where Kubernetes mounts a pod's token in each container that has no mount there: an empty
one there in simrun's containers leaves the token (Argo's, for its wait container) out of
reach of a task's code."""
STALE_S = 120
"""Seconds after which the coordinator releases the claims of a silent worker."""
STAGE_SCRIPT = """\
import os, shutil, sys
store, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for pair in filter(None, os.environ["SIMRUN_INPUTS"].split(",")):
    port, source = pair.split("=", 1)
    shutil.copytree(os.path.join(store, source), os.path.join("inputs", port), symlinks=True)
"""
"""The init container of a command task: its inputs (``SIMRUN_INPUTS``, ``port=source``
pairs relative to the store) into ``inputs/<port>`` of the scratch directory (its working
directory) and its ``out/`` created, with the run's image."""
COMMAND_SLOT = "SIMRUN-COMMAND"
"""Where the command goes in a patch: a JSON list, so outside the quotes of a string."""
PARAMETERS = ("task", "inputs", "cores", "memory", "retryMemory", "memoryGb", "retryMemoryGb")
"""The parameters every pod template takes (``task_arguments``)."""


def param(name: str) -> str:
    """The reference to a template's input parameter, substituted by Argo."""
    return f"{{{{inputs.parameters.{name}}}}}"


@dataclass(frozen=True)
class PodKind:
    """What the pods of a kind share."""

    role: str
    """``SIMRUN_ROLE``: the harness knows ``base`` and ``extra`` only."""
    worker: str | None
    """``SIMRUN_WORKER``; a merge has none."""
    command: tuple[str, ...] | None
    """The harness command it runs; None: the task's own, the ``command`` parameter."""
    node_suffix: str
    """What its DAG node adds to the task's id (the ``simrun/dag-task`` label)."""


KINDS = {
    COMMAND: PodKind("base", param("task"), None, ""),
    PLUGIN: PodKind("base", param("task"), None, ""),
    WORKER: PodKind("base", f"{param('task')}-w0", ("simrun-worker",), "-w0"),
    EXTRA: PodKind("extra", param("worker"), ("simrun-worker",), "-extra"),
    MERGE: PodKind("base", None, ("simrun-merge",), "-merge"),
}


def task_dir(task_id: str, record: RunRecord, cluster: ClusterConfig) -> str:
    return f"{cluster.store_mount}/runs/{record.id}/tasks/{task_id}"


def out_dir(task_id: str, record: RunRecord) -> str:
    """The output of a task relative to the store, as ``SIMRUN_INPUTS`` names it."""
    return f"runs/{record.id}/tasks/{task_id}/out"


def image_of(task: TaskRecord, record: RunRecord, *, own: bool) -> str:
    """The run's image, or a command task's own; ValueError without one."""
    image = (task.image if own else "") or record.image
    if not image:
        raise ValueError(f"task {task.id} has no image: the run has none")
    return image


def task_arguments(
    task: TaskRecord,
    plan: TaskPlan,
    record: RunRecord,
    types: Mapping[str, TaskType],
    *,
    kind: str,
) -> dict[str, Any]:
    """The ``arguments`` of the DAG task that runs a task's pod of ``kind``."""
    values = {
        "task": task.id,
        "inputs": ",".join(f"{port}={out_dir(src, record)}" for port, src in task.inputs.items()),
        "cores": "1" if kind == MERGE else str(plan.cores),
        "memory": memory_quantity(plan.memory_gb),
        "retryMemory": memory_quantity(plan.retry_memory_gb),
        "memoryGb": f"{plan.memory_gb:g}",
        "retryMemoryGb": f"{plan.retry_memory_gb:g}",
    }
    if kind == COMMAND:
        values["command"] = json.dumps(list(task.command), separators=(",", ":"))
        if (image := image_of(task, record, own=True)) != record.image:
            values["image"] = image
    elif kind == PLUGIN:
        task_type = types.get(task.type)
        if task_type is None or task_type.command is None:
            raise ValueError(f"task {task.id}: {task.type!r} is no plugin task type")
        command = ["simrun-exec", *task_type.command(task_type.parse_settings(task.settings))]
        values["command"] = json.dumps(command, separators=(",", ":"))
    if kind == EXTRA:
        values["worker"] = f"{task.id}-w{{{{item}}}}"
    return {"parameters": [{"name": k, "value": v} for k, v in values.items()]}


def pod_templates(
    kinds: set[str], record: RunRecord, cluster: ClusterConfig
) -> list[dict[str, Any]]:
    """The pod template of each kind of ``kinds``, in the order of ``KINDS``."""
    templates = [_pod_template(name, record, cluster) for name in KINDS if name in kinds]
    for template in templates:
        if template["name"] == COMMAND:
            _stage_inputs(template, record, cluster)
    return templates


def _stage_inputs(template: dict[str, Any], record: RunRecord, cluster: ClusterConfig) -> None:
    """A command task's own image (a parameter, the run's by default), its ``SIMRUN_OUT``
    and the init container that stages its inputs, in the run's image."""
    template["inputs"]["parameters"].append({"name": "image", "default": record.image})
    template["container"]["image"] = param("image")
    out = f"{task_dir(param('task'), record, cluster)}/out"
    template["container"]["env"].append({"name": "SIMRUN_OUT", "value": out})
    template["initContainers"] = [
        {
            "name": "stage",
            "image": record.image,
            "command": ["python", "-c", STAGE_SCRIPT, cluster.store_mount, out],
            "workingDir": SCRATCH,
            "env": [{"name": "SIMRUN_INPUTS", "value": param("inputs")}],
            "resources": _resources(1, 0.25),
            "volumeMounts": _mounts(record, cluster),
            "securityContext": container_security(),
        }
    ]


def container_security() -> dict[str, Any]:
    """What Pod Security "restricted" asks of every container (with the pod's
    ``runAsNonRoot`` and ``seccompProfile``)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _resources(cores: int, memory_gb: float) -> dict[str, Any]:
    amount = {"cpu": str(cores), "memory": memory_quantity(memory_gb)}
    return {"requests": amount, "limits": dict(amount)}


def _mounts(record: RunRecord, cluster: ClusterConfig) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": "store", "mountPath": cluster.store_mount},
        {"name": "scratch", "mountPath": SCRATCH},
        {"name": "no-token", "mountPath": TOKEN_PATH, "readOnly": True},
    ]
    if record.sources:
        # The snapshots are read-only in the pods; the harness installs them from shadow trees.
        mounts.append(
            {
                "name": "store",
                "mountPath": f"{cluster.store_mount}/snapshots",
                "subPath": "snapshots",
                "readOnly": True,
            }
        )
    return mounts


def _env(
    record: RunRecord, cluster: ClusterConfig, *, role: str, worker: str | None
) -> list[dict[str, Any]]:
    editable = ",".join(f"{cluster.store_mount}/snapshots/{digest}" for digest in record.sources)
    env: list[dict[str, Any]] = [
        {"name": "SIMRUN_STORE", "value": cluster.store_mount},
        {"name": "SIMRUN_TASK_DIR", "value": task_dir(param("task"), record, cluster)},
        {"name": "SIMRUN_INPUTS", "value": param("inputs")},
        {"name": "SIMRUN_ATTEMPT", "value": "{{retries}}"},
        {"name": "SIMRUN_ROLE", "value": role},
        *([{"name": "SIMRUN_WORKER", "value": worker}] if worker is not None else []),
        {"name": "SIMRUN_CORES", "value": param("cores")},
        {"name": "SIMRUN_STALE_S", "value": str(STALE_S)},
        {"name": "SIMRUN_SCRATCH", "value": SCRATCH},
        {"name": "SIMRUN_EDITABLE", "value": editable},
        # The server the pod runs on, for its report (the downward API).
        {"name": "SIMRUN_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "SIMRUN_MEMORY_LIMIT_GB", "value": param("memoryGb")},
    ]
    return env


def _pod_patch(*, command: bool) -> str:
    """The ``podSpecPatch`` of a pod template: the task's cores, the memory of the attempt
    (``retry_memory_patch``) and, for ``command`` and ``plugin``, the task's command."""
    memory = retry_memory_patch(
        memory="inputs.parameters.memory",
        retry_memory="inputs.parameters.retryMemory",
        memory_gb="inputs.parameters.memoryGb",
        retry_memory_gb="inputs.parameters.retryMemoryGb",
    )
    cores = param("cores")
    resources = memory["resources"]
    resources["requests"]["cpu"] = resources["limits"]["cpu"] = cores
    main = {
        "name": "main",
        **({"command": COMMAND_SLOT} if command else {}),
        "resources": resources,
        "env": memory["env"],
    }
    text = json.dumps({"containers": [main]}, separators=(",", ":"))
    return text.replace(f'"{COMMAND_SLOT}"', param("command"))


def _pod_template(name: str, record: RunRecord, cluster: ClusterConfig) -> dict[str, Any]:
    """The pod template of a kind: the ``SIMRUN_*`` environment, the retry strategy, requests
    equal to limits (set by the patch), the scratch directory's size requested as ephemeral
    storage, in the run's image."""
    kind = KINDS[name]
    parameters = [
        *PARAMETERS,
        *(["command"] if kind.command is None else []),
        *(["worker"] if name == EXTRA else []),
    ]
    return {
        "name": name,
        "inputs": {"parameters": [{"name": p} for p in parameters]},
        "metadata": {
            "labels": {
                TASK_LABEL: param("task"),
                DAG_TASK_LABEL: f"{param('task')}{kind.node_suffix}",
            }
        },
        "retryStrategy": {
            "limit": str(RETRY_LIMIT),
            "retryPolicy": "Always",
            "expression": RETRY_EXPRESSION,
            "backoff": {"duration": RETRY_BACKOFF},
        },
        "podSpecPatch": _pod_patch(command=kind.command is None),
        "volumes": [
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{cluster.scratch_gb}Gi"}},
            {"name": "no-token", "emptyDir": {"sizeLimit": "1Mi"}},
        ],
        "container": {
            "image": record.image,
            **({"command": list(kind.command)} if kind.command else {}),
            "workingDir": SCRATCH,
            "env": _env(record, cluster, role=kind.role, worker=kind.worker),
            "resources": {"requests": {"ephemeral-storage": f"{cluster.scratch_gb}Gi"}},
            "volumeMounts": _mounts(record, cluster),
            "securityContext": container_security(),
        },
    }
