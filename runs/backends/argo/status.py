"""The status of a run from its Argo Workflow: a pure function of the Workflow object, its
DAG nodes (``dag_nodes``) read with the reasons of their pods."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from kubernetes.utils import parse_quantity

from harness.lifecycle import RETRY_MEMORY_NOTE
from runs.backends.argo.dag_nodes import NODE_NAME, DagNode, dag_nodes, node_path
from runs.backends.argo.retries import EVICTION_PATTERN, SCRATCH_OVERFLOW_PATTERN
from runs.backends.base import (
    FINAL_PHASES,
    PREEMPTED_PHASE,
    RETRYING_PHASE,
    BackendStatus,
    FailedAttempt,
    worker_of_node,
)

EVICTION = re.compile(EVICTION_PATTERN)
SCRATCH_OVERFLOW = re.compile(SCRATCH_OVERFLOW_PATTERN)
AUTO_RESTART = "Pod auto-restarting"
"""The message of a node whose evicted pod Argo (v4, failedPodRestart) restarts itself."""
SHUTDOWN = "workflow shutdown"
OOM_KILLED = re.compile(r"^(main: )?OOMKilled\b")
"""The message of a node whose main container was killed for memory: ``main: OOMKilled (exit
code 137)`` since Argo 3.7, without the container before; a wait container's is no kill."""
FAILED_PHASES = frozenset({"Failed", "Error"})
NOTED_MEMORY = re.compile(re.escape(RETRY_MEMORY_NOTE) + r" \((\d+(?:\.\d+)?) GiB\)")
"""The harness's note of an attempt with the retry memory, naming it (``retry_memory_note``)."""


def is_eviction(node: dict[str, Any]) -> bool:
    """Whether a failed attempt was evicted, preempted, drained or deleted, not failed itself.

    Its message says so (kubelet, Kueue, a deleted pod), or its main container stopped on
    SIGTERM (143) outside a shutdown of the workflow.
    """
    message = node.get("message") or ""
    if SCRATCH_OVERFLOW.search(message):
        return False  # the kubelet evicted it for what the task wrote: its own failure
    if EVICTION.search(message):
        return True
    return exit_code(node) == 143 and SHUTDOWN not in message


def exit_code(node: dict[str, Any]) -> int | None:
    """The exit code of a Pod node's main container, None without one."""
    value = (node.get("outputs") or {}).get("exitCode")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _phase(entry: DagNode) -> str:
    """The phase simrun reports: Argo's, or Preempted/Retrying while a retry waits."""
    last = entry.attempts[-1][1] if entry.attempts else None
    phase = (entry.node or last or {}).get("phase") or "Pending"
    if phase in FINAL_PHASES:
        return str(phase)
    if last is None:
        return "Pending"
    if (last.get("message") or "").startswith(AUTO_RESTART):
        return PREEMPTED_PHASE
    if last.get("phase") in FAILED_PHASES:
        return PREEMPTED_PHASE if is_eviction(last) else RETRYING_PHASE
    return str(last.get("phase") or "Pending")


def _failed(attempts: list[tuple[int, dict[str, Any]]]) -> list[FailedAttempt]:
    return [
        FailedAttempt(
            attempt=number,
            exit_code=exit_code(node),
            oom_killed=bool(OOM_KILLED.match(node.get("message") or "")),
            evicted=is_eviction(node),
            node=node.get("hostNodeName") or None,
            message=node.get("message") or "",
            memory_gb=noted_memory_gb(node.get("message") or ""),
            started_at=epoch(node.get("startedAt")),
            ended_at=epoch(node.get("finishedAt")),
        )
        for number, node in attempts
        if node.get("phase") in FAILED_PHASES
    ]


def noted_memory_gb(message: str) -> float | None:
    """The retry memory an attempt's harness said it ran with in its termination message
    (Argo appends it to the node's message), None without: the memory it had even when its
    pod is gone."""
    found = NOTED_MEMORY.search(message)
    return float(found.group(1)) if found else None


def epoch(value: Any) -> float | None:
    """Unix time of an RFC 3339 time of the Workflow (``startedAt``), None when unset or bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def status_from_workflow(workflow: dict[str, Any]) -> BackendStatus:
    """The status of a Workflow: phases of its DAG nodes, failed attempts, hosts.

    Raises ``NodesUnavailable`` when the nodes are not in the object.
    """
    status = workflow.get("status") or {}
    tasks: dict[str, str] = {}
    failed: dict[str, list[FailedAttempt]] = {}
    hosts: dict[str, str] = {}
    started: dict[str, float] = {}
    waiting: dict[str, str] = {}
    for name, entry in sorted(dag_nodes(workflow).items()):
        tasks[name] = _phase(entry)
        if entry.attempts and (start := epoch(entry.attempts[-1][1].get("startedAt"))):
            started[name] = start
        # Argo's message of a pending pod: "Unschedulable: …", "ContainerCreating: …".
        message = entry.attempts[-1][1].get("message") if entry.attempts else None
        if tasks[name] == "Pending" and message:
            waiting[name] = _line(message, None, WAITING_LENGTH)
        if attempts := _failed(entry.attempts):
            failed.setdefault(worker_of_node(name), []).extend(attempts)
        for _, node in reversed(entry.attempts):
            if node.get("hostNodeName"):
                hosts[name] = node["hostNodeName"]
                break
    return BackendStatus(
        phase=status.get("phase") or "Pending",
        tasks=tasks,
        failed=failed,
        hosts=hosts,
        started=started,
        message=status.get("message") or "",
        waiting=waiting,
    )


# Reasons from the pods: why an attempt was disrupted, why a pod waits.

NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
DISRUPTIONS = ("DisruptionTarget", "TerminationTarget")
"""Pod conditions set before a pod is ended from outside: Kubernetes' (PreemptionByScheduler,
EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet, DeletionByPodGC) and
Kueue's (WorkloadEvictedDueToPreempted, …)."""
KUBELET_REASONS = frozenset({"Evicted", "Terminated", "NodeShutdown"})
"""``status.reason`` of a pod the kubelet ended (node pressure, node shutdown)."""
REASON_LENGTH = 200
"""The longest disruption reason kept (``Attempt.reason``)."""
WAITING_LENGTH = 500
GIB = 2**30


def pod_node(pod: dict[str, Any], workflow_name: str) -> tuple[str, int] | None:
    """The DAG node and the attempt of a workflow's pod, from Argo's node-name annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    name = node_path(str(annotations.get(NODE_NAME_ANNOTATION, "")), workflow_name)
    match = NODE_NAME.match(name)
    if match is None:
        return None
    return match["node"], int(match["attempt"] or 0)


def disruption_reason(pod: dict[str, Any]) -> str:
    """Why a pod was ended from outside, one line ("" for no disruption): the reason of its
    ``DisruptionTarget`` or Kueue's ``TerminationTarget`` condition, or the kubelet's."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in DISRUPTIONS and condition.get("status") == "True":
            return _line(condition.get("reason") or condition["type"], condition.get("message"))
    if status.get("reason") in KUBELET_REASONS:
        return _line(status["reason"], status.get("message"))
    return ""


def waiting_reason(pod: dict[str, Any], workload: dict[str, Any] | None) -> str:
    """Why a pending pod waits, one line ("" when it is not known): the scheduler's
    ``Unschedulable`` message, or the Kueue Workload's ``QuotaReserved``/``Admitted``."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    scheduled: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") != "False":
        return ""
    if scheduled.get("reason") == "Unschedulable":
        return _line("Unschedulable", scheduled.get("message"), WAITING_LENGTH)
    if scheduled.get("reason") == "SchedulingGated":
        return kueue_reason(workload) if workload else "waiting for Kueue to admit it"
    return ""


CANNOT_START = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
"""Reasons of a container that waits and will not start as it is (kubelet)."""
STILL_CREATING = frozenset({"ContainerCreating", "PodInitializing"})


def start_failure(pod: dict[str, Any]) -> str:
    """Why a pending pod admitted to a node cannot start, one line ("" when nothing keeps it):
    a container waiting for an image or a configuration it cannot get, or the scheduler's
    ``Unschedulable``. A pod Kueue still holds (its scheduling gates) is not stuck: it waits."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("schedulingGates") or status.get("phase", "Pending") != "Pending":
        return ""
    containers = [*(status.get("initContainerStatuses") or [])]
    containers += status.get("containerStatuses") or []
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in CANNOT_START:
            reason = f"{container.get('name')}: {waiting['reason']}"
            return _line(reason, waiting.get("message"), WAITING_LENGTH)
    conditions = status.get("conditions") or []
    scheduled: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if scheduled.get("reason") == "Unschedulable":
        return _line("Unschedulable", scheduled.get("message"), WAITING_LENGTH)
    return ""


ARGO_EXECUTOR = frozenset({"init", "wait"})
"""The containers Argo's executor adds to a pod, beside simrun's ``stage`` and ``main``."""


def still_creating(pod: dict[str, Any]) -> str:
    """Why a pending pod scheduled to a node has not started any container, one line ("" once
    one started, or while it is not scheduled): every container still waits in
    ``ContainerCreating`` or ``PodInitializing``, as when a volume cannot be mounted (the
    kubelet's ``FailedMount`` event says which) or an image is still being pulled. A
    container that ran (``stage`` copying the inputs) is no failure to start, however long
    ``main`` waits for it. Names simrun's first container (``stage``, ``main``)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("schedulingGates") or status.get("phase", "Pending") != "Pending":
        return ""
    conditions = status.get("conditions") or []
    scheduled: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") != "True":
        return ""
    containers = [*(status.get("initContainerStatuses") or [])]
    containers += status.get("containerStatuses") or []
    if not containers:
        return ""
    for container in containers:
        state = container.get("state") or {}
        waiting = state.get("waiting")
        if set(state) != {"waiting"} or (waiting or {}).get("reason") not in STILL_CREATING:
            return ""
        if container.get("lastState"):
            return ""
    own = [c for c in containers if c.get("name") not in ARGO_EXECUTOR] or containers
    return f"{own[0].get('name')}: {own[0]['state']['waiting']['reason']}"


def creating_too_long(pod: dict[str, Any], now: float, timeout_s: float) -> bool:
    """Whether a pod has started no container (``still_creating``) for ``timeout_s`` since it
    was scheduled: the pods whose events the backend reads (``kubelet_warning``)."""
    since = pending_since(pod)
    return bool(still_creating(pod)) and since is not None and now - since >= timeout_s


def kubelet_warning(events: list[dict[str, Any]]) -> str:
    """The kubelet's last warning of a pod's events, one line ("" without one): a volume it
    cannot mount (``FailedMount``), an image it cannot pull."""
    warnings = [
        e
        for e in events
        if e.get("type") == "Warning"
        and "kubelet" in {(e.get("source") or {}).get("component"), e.get("reportingComponent")}
    ]
    if not warnings:
        return ""
    last = max(
        enumerate(warnings),
        key=lambda pair: (
            epoch(pair[1].get("lastTimestamp") or pair[1].get("eventTime")) or 0.0,
            pair[0],
        ),
    )[1]
    return _line(last.get("reason") or "Warning", last.get("message"), WAITING_LENGTH)


def mount_failure(events: list[dict[str, Any]]) -> str:
    """The last ``FailedMount`` of a pod's events, one line ("" without one): a volume whose
    Secret or ConfigMap is missing in the pod's namespace keeps it ``ContainerCreating``."""
    failed = [e for e in events if e.get("reason") == "FailedMount"]
    return _line("FailedMount", failed[-1].get("message"), WAITING_LENGTH) if failed else ""


KUEUE_MANAGED = "kueue.x-k8s.io/managed"
"""The label Kueue's webhook gives a pod it gates (and its Workload admits)."""


def pending_since(pod: dict[str, Any], workload: dict[str, Any] | None = None) -> float | None:
    """When a pending pod began waiting to start: when it was scheduled (its PodScheduled
    condition True); else, unscheduled, the latest of its creation, its PodScheduled False and
    its admission by Kueue (``workload``: its Workload's Admitted condition), so the time it
    waited gated in Kueue's queue never counts. The PodScheduled condition alone does not
    tell: the API server makes a gated pod ``SchedulingGated`` at its creation, and the
    scheduler, finding it ``Unschedulable`` once Kueue removed the gate, keeps that
    ``lastTransitionTime`` (the status stayed False). None when it cannot be told: a pod Kueue
    gated whose admission is not known."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    scheduled: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") == "True":
        return epoch(scheduled.get("lastTransitionTime"))
    times = [epoch((pod.get("metadata") or {}).get("creationTimestamp"))]
    if scheduled.get("status") == "False":
        times.append(epoch(scheduled.get("lastTransitionTime")))
    if kueue_managed(pod):
        admitted = admitted_at(workload) if workload else None
        if admitted is None:
            return None
        times.append(admitted)
    known = [t for t in times if t is not None]
    return max(known) if known else None


def kueue_managed(pod: dict[str, Any]) -> bool:
    """Whether Kueue's webhook gated the pod (its label), so Kueue admitted it or holds it."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(KUEUE_MANAGED) == "true"


def admitted_at(workload: dict[str, Any]) -> float | None:
    """When Kueue admitted a Workload (its Admitted condition True), None while it has not."""
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Admitted" and condition.get("status") == "True":
            return epoch(condition.get("lastTransitionTime"))
    return None


def needs_workload(pod: dict[str, Any]) -> bool:
    """Whether a pod's Kueue Workload tells something of it: why it is held (its scheduling
    gates), or, admitted but unschedulable, since when it may start (``pending_since``)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("schedulingGates"):
        return True
    if status.get("phase", "Pending") != "Pending" or not kueue_managed(pod):
        return False
    conditions = status.get("conditions") or []
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def kueue_reason(workload: dict[str, Any]) -> str:
    """Where a pod's Kueue Workload stands: no quota yet, quota but no admission, admitted."""
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    quota = conditions.get("QuotaReserved") or {}
    admitted = conditions.get("Admitted") or {}
    if admitted.get("status") == "True":
        return "admitted by Kueue, waiting to be scheduled"
    if quota.get("status") == "True":
        reserved = "quota reserved by Kueue, waiting for admission"
        return _line(reserved, admitted.get("message"), WAITING_LENGTH)
    return _line("waiting for quota in Kueue", quota.get("message"), WAITING_LENGTH)


def main_memory_gb(pod: dict[str, Any]) -> float | None:
    """The memory limit of a pod's main container in GiB (its podSpecPatch applied)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == "main":
            limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
            return float(parse_quantity(limit)) / GIB if limit else None  # type: ignore[no-untyped-call]  # kubernetes.utils is unannotated
    return None


def with_pods(
    status: BackendStatus,
    workflow_name: str,
    pods: list[dict[str, Any]],
    workloads: dict[str, dict[str, Any]],
    *,
    now: float | None = None,
    start_timeout_s: float | None = None,
    warnings: dict[str, str] | None = None,
    scaling: frozenset[str] = frozenset(),
) -> BackendStatus:
    """A status with what the pods tell: each failed attempt's disruption reason and memory,
    each pending node's reason for waiting (``workloads``: Kueue Workloads by pod uid).

    A pod that cannot start (``start_failure``), or scheduled has started no container
    (``still_creating``), for ``start_timeout_s`` since it began waiting to start (scheduled,
    else admitted by Kueue: ``pending_since``) fails its node, with the reason, so the run
    ends and its quota is freed instead of held; ``warnings`` (the kubelet's last warning by
    pod name, ``kubelet_warning``) tells why a pod that started nothing is stuck. A pod no node
    fits for which the cluster autoscaler is adding one (``scaling``, by pod name:
    ``scaling_up``) is not stuck: it waits for the node.
    """
    failed = {key: [a.model_copy() for a in attempts] for key, attempts in status.failed.items()}
    waiting = dict(status.waiting)
    tasks = dict(status.tasks)
    for pod in pods:
        found = pod_node(pod, workflow_name)
        if found is None:
            continue
        node, number = found
        for attempt in failed.get(worker_of_node(node), []):
            if attempt.attempt != number:
                continue
            attempt.reason = disruption_reason(pod)
            attempt.memory_gb = attempt.memory_gb or main_memory_gb(pod)
            overflow = bool(SCRATCH_OVERFLOW.search(attempt.message))
            attempt.evicted = attempt.evicted or (
                bool(attempt.reason) and not attempt.oom_killed and not overflow
            )
        if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            uid = (pod.get("metadata") or {}).get("uid", "")
            workload = workloads.get(uid)
            if reason := waiting_reason(pod, workload):
                waiting[node] = reason
            warning = (warnings or {}).get((pod.get("metadata") or {}).get("name", ""), "")
            stuck = _stuck(pod, workload, now, start_timeout_s, warning)
            if stuck and (pod.get("metadata") or {}).get("name") in scaling:
                waiting[node] = SCALING_UP
                stuck = ""
            if stuck and tasks.get(node) not in FINAL_PHASES:
                tasks[node] = "Failed"
                waiting.pop(node, None)
                since = pending_since(pod, workload)
                failed.setdefault(worker_of_node(node), []).append(
                    FailedAttempt(attempt=number, message=stuck, started_at=since)
                )
    return status.model_copy(update={"failed": failed, "waiting": waiting, "tasks": tasks})


SCALING_UP = "Unschedulable: the cluster autoscaler is adding a node for it"
AUTOSCALER_REASONS = frozenset({"TriggeredScaleUp", "NotTriggerScaleUp"})


def unschedulable_too_long(
    pod: dict[str, Any], workload: dict[str, Any] | None, now: float, timeout_s: float
) -> bool:
    """Whether no node has fitted a pod for ``timeout_s`` since it began waiting to start: the
    pods whose events say whether the cluster autoscaler brings a node (``scaling_up``)."""
    since = pending_since(pod, workload)
    unschedulable = start_failure(pod).startswith("Unschedulable")
    return unschedulable and since is not None and now - since >= timeout_s


def scaling_up(events: list[dict[str, Any]]) -> bool:
    """Whether the cluster autoscaler is adding a node for a pod: its last event about it is
    ``TriggeredScaleUp``, not ``NotTriggerScaleUp`` (no node group would fit it)."""
    said = [e for e in events if e.get("reason") in AUTOSCALER_REASONS]
    said.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return bool(said) and said[-1]["reason"] == "TriggeredScaleUp"


def _stuck(
    pod: dict[str, Any],
    workload: dict[str, Any] | None,
    now: float | None,
    timeout_s: float | None,
    warning: str = "",
) -> str:
    """Why a pod could not start within ``timeout_s`` of when it began waiting to start
    (``pending_since``), "" while it may still start; a pod that started no container is
    told by the kubelet's last ``warning`` when it is known."""
    if now is None or timeout_s is None:
        return ""
    reason, since = start_failure(pod), pending_since(pod, workload)
    if not reason and (reason := still_creating(pod)) and warning:
        reason = f"{reason}: {warning}"
    if not reason or since is None or now - since < timeout_s:
        return ""
    return _line(f"its pod could not start within {timeout_s:g} s: {reason}", None, WAITING_LENGTH)


def _line(reason: str, message: str | None, length: int = REASON_LENGTH) -> str:
    text = f"{reason}: {message}" if message else reason
    return " ".join(text.split())[:length]
