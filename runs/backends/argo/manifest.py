"""The Argo Workflow of a run: a pure function of the run, its plans and the cluster.

A run becomes one Workflow ``simrun-<run id>`` whose DAG has, for a split task T, the
coordinator ``T-w0``, the extra workers ``T-extra`` (fanned out: nodes ``T-extra(<i>:<n>)``
with ``SIMRUN_WORKER=T-w<n>``) and ``T-merge`` after the coordinator; for an unsplit task the
node ``T``. Each DAG task calls the pod template of its kind with the task's parameters
(``pod_templates``); a DAG past Argo's 200 tasks is nested in parts (``dag_parts``). Every
pod template retries evictions, preemptions, kills and storage errors (the attempt right
after an exit 137 with the retry memory, by a ``podSpecPatch`` on ``lastRetry``, Argo ≥ 3.7)
and never a genuine failure. Quantities and IntOrString fields are strings, so the manifest
validates against Argo's JSON schema as well as against the CRD.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.tasktypes import TaskType
from runs.backends.argo.dag_parts import nested
from runs.backends.argo.pod_templates import (
    COMMAND,
    EXTRA,
    MERGE,
    PLUGIN,
    WORKER,
    image_of,
    pod_templates,
    task_arguments,
)
from runs.backends.argo.workflow_limits import DAG_TASKS_MAX
from runs.backends.base import (
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
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
INSTANCE_LABEL = "workflows.argoproj.io/controller-instanceid"
"""The label by which a controller configured with an ``instanceID`` picks its Workflows (and
Argo puts on their pods); a controller without one runs only the Workflows without it."""
RESERVED_KEY = "simrun/reserved"
"""Key of the taint and of the label of a node reserved for a run (value: the run id)."""
RESERVATION_EFFECT = "NoSchedule"
"""The effect of a reservation's taint: other new pods are kept off, the pods already there
(DaemonSets among them) stay."""

RUN_AS_USER = 1000
"""The user of every pod (the harness image's), so the store has one owner."""
POD_GC_DELAY = "10m"
"""Succeeded pods stay this long, so the controller keeps their logs; failed pods stay until
the workflow's time to live ends."""


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
    units: dict[str, list[dict[str, Any]]] = {}
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
        image_of(task, record, own=False)
        if task.kind == "split":
            units[task.id] = _split_dag(task, plan, record, types, after)
        elif task.kind in (COMMAND, PLUGIN):
            arguments = task_arguments(task, plan, record, types, kind=task.kind)
            units[task.id] = [
                {"name": task.id, "template": task.kind, "arguments": arguments, **after}
            ]
        else:
            raise ValueError(f"task {task.id}: unknown kind {task.kind!r}")
    kinds = {node["template"] for nodes in units.values() for node in nodes}
    reads = {
        task_id: {src for src in record.tasks[task_id].inputs.values() if src in units}
        for task_id in units
    }
    dag, parts = nested(units, reads, ENTRYPOINT, DAG_TASKS_MAX)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workflow",
        "metadata": {
            "name": workflow_name(record.id),
            "namespace": cluster.namespace,
            "labels": {RUN_LABEL: record.id, **instance_labels(cluster)},
            **({"annotations": {"simrun/name": record.name}} if record.name else {}),
        },
        "spec": _workflow_spec(
            record, cluster, [dag, *parts, *pod_templates(kinds, record, cluster)]
        ),
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


def _split_dag(
    task: TaskRecord,
    plan: TaskPlan,
    record: RunRecord,
    types: Mapping[str, TaskType],
    after: dict[str, Any],
) -> list[dict[str, Any]]:
    """The DAG nodes of a split task: coordinator, extra workers fanned out, merge."""

    def arguments(kind: str) -> dict[str, Any]:
        return task_arguments(task, plan, record, types, kind=kind)

    nodes = [{"name": f"{task.id}-w0", "template": WORKER, "arguments": arguments(WORKER), **after}]
    if plan.workers > 1:
        nodes.append(
            {
                "name": f"{task.id}-extra",
                "template": EXTRA,
                "arguments": arguments(EXTRA),
                **after,
                "withSequence": {"start": "1", "end": str(plan.workers - 1)},
                # An extra worker never fails its task: the coordinator takes its units.
                "continueOn": {"failed": True, "error": True},
            }
        )
    if not plan.coordinator_merges:
        nodes.append(
            {
                "name": f"{task.id}-merge",
                "template": MERGE,
                "arguments": arguments(MERGE),
                "dependencies": [f"{task.id}-w0"],
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
