"""The Argo Workflow of a run: a pure function of the run, its plans and the cluster.

A run becomes one Workflow ``simrun-<run id>`` whose DAG has, for a split task T, the
coordinator ``T-w0``, the extra workers ``T-extra`` (fanned out: nodes ``T-extra(<i>:<n>)``
with ``SIMRUN_WORKER=T-w<n>``) and ``T-merge`` after the coordinator; for an unsplit task the
node ``T``. Every pod template retries evictions, preemptions, kills and storage errors (the
attempt right after an exit 137 with the retry memory, by a ``podSpecPatch`` on ``lastRetry``,
Argo ≥ 3.7) and never a genuine failure. Quantities and IntOrString fields are strings, so
the manifest validates against Argo's JSON schema as well as against the CRD.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from harness.tasktypes import TaskType
from runs.backends.argo.retries import (
    RETRY_BACKOFF,
    RETRY_EXPRESSION,
    memory_quantity,
    retry_memory_patch,
)
from runs.backends.base import (
    RETRY_LIMIT,
    ClusterConfig,
    RunRecord,
    TaskPlan,
    TaskRecord,
    workflow_name,
)

GROUP = "argoproj.io"
VERSION = "v1alpha1"
PLURAL = "workflows"

ENTRYPOINT = "Run"
"""The DAG template; upper case, so no task id (lower case only) can collide with it."""
RUN_LABEL = "simrun/run"
TASK_LABEL = "simrun/task"
DAG_TASK_LABEL = "simrun/dag-task"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
INSTANCE_LABEL = "workflows.argoproj.io/controller-instanceid"
"""The label by which a controller configured with an ``instanceID`` picks its Workflows (and
Argo puts on their pods); a controller without one runs only the Workflows without it."""
RESERVED_KEY = "simrun/reserved"
"""Key of the taint and of the label of a node reserved for a run (value: the run id)."""
RESERVATION_EFFECT = "NoSchedule"
"""The effect of a reservation's taint: other new pods are kept off, the pods already there
(DaemonSets among them) stay."""

SCRATCH = "/scratch"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where Kubernetes mounts a pod's token in each container that has no mount there: an empty
one there in simrun's containers leaves the token (Argo's, for its wait container) out of
reach of a task's code."""
STALE_S = 120
"""Seconds after which the coordinator releases the claims of a silent worker."""
RUN_AS_USER = 1000
"""The user of every pod (the harness image's), so the store has one owner."""
POD_GC_DELAY = "10m"
"""Succeeded pods stay this long, so the controller keeps their logs; failed pods stay until
the workflow's time to live ends."""

STAGE_SCRIPT = """\
import os, shutil, sys
store, out, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(out, exist_ok=True)
for pair in pairs:
    port, source = pair.split("=", 1)
    shutil.copytree(os.path.join(store, source), os.path.join("inputs", port), symlinks=True)
"""
"""The init container of a command task: its inputs into ``inputs/<port>`` of the scratch
directory (its working directory) and its ``out/`` created, with the run's image."""


def done_node(task_id: str, record: RunRecord, plans: Mapping[str, TaskPlan]) -> str:
    """The DAG node whose success means a task's output is complete."""
    if record.tasks[task_id].kind != "split":
        return task_id
    return f"{task_id}-w0" if plans[task_id].coordinator_merges else f"{task_id}-merge"


def workflow_manifest(
    *,
    record: RunRecord,
    plans: Mapping[str, TaskPlan],
    types: Mapping[str, TaskType],
    cluster: ClusterConfig,
) -> dict[str, Any]:
    """The Workflow of a run; ValueError when a task cannot run (no image, unknown type)."""
    if missing := sorted(set(record.tasks) - set(plans)):
        raise ValueError(f"no plan for the tasks {', '.join(missing)}")
    dag: list[dict[str, Any]] = []
    templates: list[dict[str, Any]] = []
    for task in record.tasks.values():
        if task.id in record.reused:
            continue  # done before the run from earlier outputs: read as they are
        plan = plans[task.id]
        dependencies = sorted(
            {
                done_node(src, record, plans)
                for src in task.inputs.values()
                if src not in record.reused
            }
        )
        after = {"dependencies": dependencies} if dependencies else {}
        if task.kind == "split":
            pods = _split_task(task, plan, record, cluster)
            dag += _split_dag(task.id, plan, after)
        else:
            pods = [_unsplit_task(task, plan, record, types, cluster)]
            dag.append({"name": task.id, "template": task.id, **after})
        templates += pods
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workflow",
        "metadata": {
            "name": workflow_name(record.id),
            "namespace": cluster.namespace,
            "labels": {RUN_LABEL: record.id, **instance_labels(cluster)},
            **({"annotations": {"simrun/name": record.name}} if record.name else {}),
        },
        "spec": _workflow_spec(record, cluster, [_dag_template(dag), *templates]),
    }


def instance_labels(cluster: ClusterConfig) -> dict[str, str]:
    """The label that hands a Workflow to the controller of ``argo_instance_id`` (none
    without one: such a controller runs only the Workflows without it)."""
    return {INSTANCE_LABEL: cluster.argo_instance_id} if cluster.argo_instance_id else {}


def runs_selector(cluster: ClusterConfig) -> str:
    """The label selector of the runs' Workflows and pods of this service's Argo controller:
    labelled with a run, and with its ``instanceID`` (or, without one, not labelled with any),
    as Argo's controller selects them."""
    if cluster.argo_instance_id:
        return f"{RUN_LABEL},{INSTANCE_LABEL}={cluster.argo_instance_id}"
    return f"{RUN_LABEL},!{INSTANCE_LABEL}"


def _split_dag(task_id: str, plan: TaskPlan, after: dict[str, Any]) -> list[dict[str, Any]]:
    """The DAG nodes of a split task: coordinator, extra workers fanned out, merge."""
    nodes = [{"name": f"{task_id}-w0", "template": f"{task_id}-w0", **after}]
    if plan.workers > 1:
        nodes.append(
            {
                "name": f"{task_id}-extra",
                "template": f"{task_id}-extra",
                **after,
                "withSequence": {"start": "1", "end": str(plan.workers - 1)},
                "arguments": {
                    "parameters": [{"name": "worker", "value": f"{task_id}-w{{{{item}}}}"}]
                },
                # An extra worker never fails its task: the coordinator takes its units.
                "continueOn": {"failed": True, "error": True},
            }
        )
    if not plan.coordinator_merges:
        nodes.append(
            {
                "name": f"{task_id}-merge",
                "template": f"{task_id}-merge",
                "dependencies": [f"{task_id}-w0"],
            }
        )
    return nodes


def _workflow_spec(
    record: RunRecord, cluster: ClusterConfig, templates: list[dict[str, Any]]
) -> dict[str, Any]:
    node_selector = dict(cluster.node_selector)
    tolerations = []
    if record.reserved_node:
        node_selector[RESERVED_KEY] = record.id
        tolerations.append(
            {
                "key": RESERVED_KEY,
                "operator": "Equal",
                "value": record.id,
                "effect": RESERVATION_EFFECT,
            }
        )
    spec: dict[str, Any] = {
        "entrypoint": ENTRYPOINT,
        "serviceAccountName": cluster.service_account,
        "podMetadata": {"labels": {RUN_LABEL: record.id, QUEUE_LABEL: cluster.queue}},
        "podGC": {"strategy": "OnPodSuccess", "deleteDelayDuration": POD_GC_DELAY},
        "ttlStrategy": {"secondsAfterCompletion": cluster.ttl_s},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            # Without it a driver that honours fsGroup re-owns the whole shared store at every
            # mount of every pod; the store's root is the pods' user's already.
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": cluster.store_claim}}],
        "templates": templates,
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if cluster.pull_secret:
        spec["imagePullSecrets"] = [{"name": cluster.pull_secret}]
    return spec


def _dag_template(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    # Without failFast a failed node does not keep the others from starting; the controller,
    # not Argo, decides the run (Ruling 17b) and stops the workflow.
    return {"name": ENTRYPOINT, "dag": {"failFast": False, "tasks": tasks}}


def _split_task(
    task: TaskRecord, plan: TaskPlan, record: RunRecord, cluster: ClusterConfig
) -> list[dict[str, Any]]:
    pod = partial(
        _pod_template,
        task=task,
        plan=plan,
        record=record,
        cluster=cluster,
        image=_image(task, record, own=False),
    )
    templates = [
        pod(
            name=f"{task.id}-w0",
            command=["simrun-worker"],
            role="base",
            worker=f"{task.id}-w0",
            cores=plan.cores,
        )
    ]
    if plan.workers > 1:
        templates.append(
            pod(
                name=f"{task.id}-extra",
                command=["simrun-worker"],
                role="extra",
                worker="{{inputs.parameters.worker}}",
                cores=plan.cores,
                parameters=["worker"],
            )
        )
    if not plan.coordinator_merges:
        # The harness knows the roles base and extra only; a merge has no worker id.
        templates.append(
            pod(
                name=f"{task.id}-merge", command=["simrun-merge"], role="base", worker=None, cores=1
            )
        )
    return templates


def _unsplit_task(
    task: TaskRecord,
    plan: TaskPlan,
    record: RunRecord,
    types: Mapping[str, TaskType],
    cluster: ClusterConfig,
) -> dict[str, Any]:
    pod = partial(
        _pod_template,
        name=task.id,
        task=task,
        plan=plan,
        record=record,
        cluster=cluster,
        role="base",
        worker=task.id,
        cores=plan.cores,
    )
    if task.kind == "plugin":
        task_type = types.get(task.type)
        if task_type is None or task_type.command is None:
            raise ValueError(f"task {task.id}: {task.type!r} is no plugin task type")
        command = task_type.command(task_type.parse_settings(task.settings))
        return pod(image=_image(task, record, own=False), command=["simrun-exec", *command])
    if task.kind != "command":
        raise ValueError(f"task {task.id}: unknown kind {task.kind!r}")
    out = f"{_task_dir(task.id, record, cluster)}/out"
    template = pod(
        image=_image(task, record, own=True),
        command=list(task.command),
        env=[{"name": "SIMRUN_OUT", "value": out}],
    )
    stage_image = _image(task, record, own=False)
    pairs = [f"{port}={_out_dir(src, record)}" for port, src in sorted(task.inputs.items())]
    template["initContainers"] = [
        {
            "name": "stage",
            "image": stage_image,
            "command": ["python", "-c", STAGE_SCRIPT, cluster.store_mount, out, *pairs],
            "workingDir": SCRATCH,
            "resources": _resources(1, 0.25),
            "volumeMounts": _mounts(record, cluster),
            "securityContext": _container_security(),
        }
    ]
    return template


def _image(task: TaskRecord, record: RunRecord, *, own: bool) -> str:
    """The run's image, or a command task's own; ValueError without one."""
    image = (task.image if own else "") or record.image
    if not image:
        raise ValueError(f"task {task.id} has no image: the run has none")
    return image


def _task_dir(task_id: str, record: RunRecord, cluster: ClusterConfig) -> str:
    return f"{cluster.store_mount}/runs/{record.id}/tasks/{task_id}"


def _out_dir(task_id: str, record: RunRecord) -> str:
    """The output of a task relative to the store, as ``SIMRUN_INPUTS`` names it."""
    return f"runs/{record.id}/tasks/{task_id}/out"


def _env(
    task: TaskRecord,
    record: RunRecord,
    cluster: ClusterConfig,
    *,
    role: str,
    worker: str | None,
    cores: int,
) -> list[dict[str, Any]]:
    inputs = ",".join(f"{port}={_out_dir(src, record)}" for port, src in task.inputs.items())
    editable = ",".join(f"{cluster.store_mount}/snapshots/{digest}" for digest in record.sources)
    env: list[dict[str, Any]] = [
        {"name": "SIMRUN_STORE", "value": cluster.store_mount},
        {"name": "SIMRUN_TASK_DIR", "value": _task_dir(task.id, record, cluster)},
        {"name": "SIMRUN_INPUTS", "value": inputs},
        {"name": "SIMRUN_ATTEMPT", "value": "{{retries}}"},
        {"name": "SIMRUN_ROLE", "value": role},
        {"name": "SIMRUN_CORES", "value": str(cores)},
        {"name": "SIMRUN_STALE_S", "value": str(STALE_S)},
        {"name": "SIMRUN_SCRATCH", "value": SCRATCH},
        {"name": "SIMRUN_EDITABLE", "value": editable},
        # The server the pod runs on, for its report (the downward API).
        {"name": "SIMRUN_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    if worker is not None:
        env.insert(5, {"name": "SIMRUN_WORKER", "value": worker})
    return env


def _container_security() -> dict[str, Any]:
    """What Pod Security "restricted" asks of every container (with the pod's
    ``runAsNonRoot`` and ``seccompProfile``)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _resources(cores: int, memory_gb: float, scratch_gb: int = 0) -> dict[str, Any]:
    """Requests equal to limits; the scratch directory's size requested as ephemeral storage
    (``scratch_gb``), so the scheduler places the pod where that much local disk is free."""
    amount = {"cpu": str(cores), "memory": memory_quantity(memory_gb)}
    requests = {**amount, **({"ephemeral-storage": f"{scratch_gb}Gi"} if scratch_gb else {})}
    return {"requests": requests, "limits": dict(amount)}


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


def _pod_template(
    *,
    name: str,
    task: TaskRecord,
    plan: TaskPlan,
    record: RunRecord,
    cluster: ClusterConfig,
    image: str,
    command: list[str],
    role: str,
    worker: str | None,
    cores: int,
    env: Sequence[dict[str, str]] = (),
    parameters: list[str] | None = None,
) -> dict[str, Any]:
    """A pod of a task: its ``SIMRUN_*`` environment (``env`` added), the retry strategy, the
    plan's memory and its retry memory, requests equal to limits."""
    environment = [
        *_env(task, record, cluster, role=role, worker=worker, cores=cores),
        {"name": "SIMRUN_MEMORY_LIMIT_GB", "value": f"{plan.memory_gb:g}"},
        *env,
    ]
    return {
        "name": name,
        "metadata": {"labels": {TASK_LABEL: task.id, DAG_TASK_LABEL: name}},
        **({"inputs": {"parameters": [{"name": p} for p in parameters]}} if parameters else {}),
        "retryStrategy": {
            "limit": str(RETRY_LIMIT),
            "retryPolicy": "Always",
            "expression": RETRY_EXPRESSION,
            "backoff": {"duration": RETRY_BACKOFF},
        },
        "podSpecPatch": retry_memory_patch(plan.memory_gb, plan.retry_memory_gb),
        "volumes": [
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{cluster.scratch_gb}Gi"}},
            {"name": "no-token", "emptyDir": {"sizeLimit": "1Mi"}},
        ],
        "container": {
            "image": image,
            "command": command,
            "workingDir": SCRATCH,
            "env": environment,
            "resources": _resources(cores, plan.memory_gb, cluster.scratch_gb),
            "volumeMounts": _mounts(record, cluster),
            "securityContext": _container_security(),
        },
    }
