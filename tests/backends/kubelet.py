"""What a kubelet and the scheduler make of a new pod, for the strict stand-in (``kube_api``).

The scheduler places a pod on a node whose allocatable cores and memory hold its requests
(when the nodes say what they hold): none leaves it ``Unschedulable``, its ``PodScheduled``
condition keeping the ``lastTransitionTime`` it had (the scheduler changes it only when the
status changes: a pod Kueue held, ``SchedulingGated`` since its creation, is ``Unschedulable``
as of its creation). References resolve in the pod's own namespace, as Kubernetes resolves
them: a claim that is missing leaves the pod unschedulable, a Secret or ConfigMap volume
that is missing leaves it ``ContainerCreating`` (``PodInitializing`` with init containers)
with ``FailedMount`` events, one an
environment variable reads makes its containers wait in ``CreateContainerConfigError``, and
an image that cannot be pulled in ``ErrImagePull`` then ``ImagePullBackOff``; each with the
event the kubelet writes, in its words. A pod that meets none of these is left for the test to run.
"""

from __future__ import annotations

import time
from decimal import Decimal
from functools import partial
from typing import Any, Protocol

from kubernetes.utils import parse_quantity

from tests.backends import kueue


class Cluster(Protocol):
    """What the kubelet needs of the stand-in's state."""

    secrets: dict[tuple[str, str], dict[str, Any]]
    config_maps: dict[tuple[str, str], dict[str, Any]]
    claims: set[tuple[str, str]]
    unpullable: set[str]
    nodes: dict[str, dict[str, Any]]

    def record_event(
        self, pod: dict[str, Any], reason: str, message: str, kind: str = "Warning"
    ) -> None: ...


def start(cluster: Cluster, pod: dict[str, Any]) -> None:
    """Give a new pod the status and events its references and images earn it."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    namespace = meta.get("namespace", "default")
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    pending = partial(_pending, containers=containers, inits=len(spec.get("initContainers") or []))
    for volume in spec.get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and (namespace, claim) not in cluster.claims:
            message = f'0/3 nodes are available: persistentvolumeclaim "{claim}" not found.'
            cluster.record_event(pod, "FailedScheduling", message)
            pod["status"] = _unschedulable(pod, message)
            return
    if message := _no_node_fits(cluster, spec):
        cluster.record_event(pod, "FailedScheduling", message)
        pod["status"] = _unschedulable(pod, message)
        return
    for volume in spec.get("volumes") or []:
        missing = _missing_volume_source(cluster, namespace, volume)
        if missing:
            message = f'MountVolume.SetUp failed for volume "{volume["name"]}" : {missing}'
            cluster.record_event(pod, "FailedMount", message)
            # The kubelet's default waiting reason: PodInitializing for every container of a
            # pod with init containers, ContainerCreating without (kubelet_pods.go).
            creating = "PodInitializing" if spec.get("initContainers") else "ContainerCreating"
            pod["status"] = pending(reason=creating)
            return
    for container in containers:
        missing = _missing_env_source(cluster, namespace, container)
        if missing:
            cluster.record_event(pod, "Failed", f"Error: {missing}")
            pod["status"] = pending(
                reason="CreateContainerConfigError",
                message=missing,
                stuck=container["name"],
            )
            return
    for container in containers:
        image = container.get("image", "")
        if image in cluster.unpullable:
            pulled = (
                f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to '
                f'pull and unpack image "{image}": not found'
            )
            cluster.record_event(pod, "Failed", pulled)
            cluster.record_event(pod, "Failed", "Error: ErrImagePull")
            cluster.record_event(pod, "BackOff", f'Back-off pulling image "{image}"', "Normal")
            pod["status"] = pending(
                reason="ImagePullBackOff",
                message=f'Back-off pulling image "{image}": ErrImagePull: {pulled}',
                stuck=container["name"],
            )
            return


def gated() -> dict[str, Any]:
    """The ``PodScheduled`` condition the API server gives a pod created with scheduling gates."""
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
        "lastTransitionTime": _now(),
    }


def _unschedulable(pod: dict[str, Any], message: str) -> dict[str, Any]:
    """The status of a pod no node takes: ``PodScheduled`` False, its ``lastTransitionTime``
    kept from a ``PodScheduled`` that was False already (``SchedulingGated``)."""
    status = _pending(unschedulable=message)
    before = [
        c
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    if before and before[0].get("lastTransitionTime"):
        status["conditions"][0]["lastTransitionTime"] = before[0]["lastTransitionTime"]
    return status


def _no_node_fits(cluster: Cluster, spec: dict[str, Any]) -> str:
    """The scheduler's message when no node holds a pod's cores and memory ("" when one does,
    or when no node says what it holds)."""
    sized = [n for n in cluster.nodes.values() if (n.get("status") or {}).get("allocatable")]
    wanted = spec.get("nodeSelector") or {}
    sized = [n for n in sized if wanted.items() <= (n["metadata"].get("labels") or {}).items()]
    if not sized:
        return ""
    requests = kueue.pod_requests(spec)
    short: dict[str, int] = {}
    for node in sized:
        allocatable = node["status"]["allocatable"]
        lacking = [
            name
            for name in ("cpu", "memory")
            if requests.get(name, Decimal(0)) > _quantity(allocatable.get(name, "0"))
        ]
        if not lacking:
            return ""
        for name in lacking:
            short[name] = short.get(name, 0) + 1
    reasons = ", ".join(f"{count} Insufficient {name}" for name, count in sorted(short.items()))
    return f"0/{len(sized)} nodes are available: {reasons}."


def _quantity(value: Any) -> Decimal:
    parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]  # unannotated
    return parsed


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _missing_volume_source(cluster: Cluster, namespace: str, volume: dict[str, Any]) -> str:
    for field, key, store, word in (
        ("secret", "secretName", cluster.secrets, "secret"),
        ("configMap", "name", cluster.config_maps, "configmap"),
    ):
        source = volume.get(field)
        if source and not source.get("optional") and (namespace, source.get(key)) not in store:
            return f'{word} "{source.get(key)}" not found'
    return ""


def _missing_env_source(cluster: Cluster, namespace: str, container: dict[str, Any]) -> str:
    sources = [
        *((e.get("valueFrom") or {}) for e in container.get("env") or []),
        *(container.get("envFrom") or []),
    ]
    for source in sources:
        for field, store, word in (
            ("secretKeyRef", cluster.secrets, "secret"),
            ("secretRef", cluster.secrets, "secret"),
            ("configMapKeyRef", cluster.config_maps, "configmap"),
            ("configMapRef", cluster.config_maps, "configmap"),
        ):
            ref = source.get(field)
            if ref and not ref.get("optional") and (namespace, ref.get("name")) not in store:
                return f'{word} "{ref.get("name")}" not found'
    return ""


def _pending(
    *,
    containers: list[dict[str, Any]] = (),  # type: ignore[assignment]
    reason: str = "",
    message: str = "",
    unschedulable: str = "",
    stuck: str = "",
    inits: int = 0,
) -> dict[str, Any]:
    """A pending pod's status: every container waiting for ``reason``, or (``stuck``) that
    container waiting for it, those before it done, those after it waiting their turn."""
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}
    if unschedulable:
        scheduled.update(status="False", reason="Unschedulable", message=unschedulable)
    status: dict[str, Any] = {"phase": "Pending", "conditions": [scheduled]}
    names = [c["name"] for c in containers]
    at = names.index(stuck) if stuck else -1
    statuses = []
    for index, container in enumerate(containers):
        if stuck and index < at:
            state = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        elif not stuck or index == at:
            state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        else:
            state = {"waiting": {"reason": "PodInitializing"}}
        statuses.append(
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": state,
            }
        )
    if statuses:
        status["initContainerStatuses"] = statuses[:inits]
        status["containerStatuses"] = statuses[inits:]
    return status
