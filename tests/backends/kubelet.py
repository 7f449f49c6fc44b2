"""What a kubelet and the scheduler make of a new pod, for the strict stand-in (``kube_api``).

References resolve in the pod's own namespace, as Kubernetes resolves them: a claim that is
missing leaves the pod unschedulable, a Secret or ConfigMap volume that is missing leaves it
``ContainerCreating`` with ``FailedMount`` events, one an environment variable reads makes
its containers wait in ``CreateContainerConfigError``, and an image that cannot be pulled in
``ErrImagePull`` then ``ImagePullBackOff``; each with the event the kubelet writes, in its
words. A pod that meets none of these is left for the test to run.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Protocol


class Cluster(Protocol):
    """What the kubelet needs of the stand-in's state."""

    secrets: dict[tuple[str, str], dict[str, Any]]
    config_maps: dict[tuple[str, str], dict[str, Any]]
    claims: set[tuple[str, str]]
    unpullable: set[str]

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
            pod["status"] = _pending(unschedulable=message)
            return
    for volume in spec.get("volumes") or []:
        missing = _missing_volume_source(cluster, namespace, volume)
        if missing:
            message = f'MountVolume.SetUp failed for volume "{volume["name"]}" : {missing}'
            cluster.record_event(pod, "FailedMount", message)
            pod["status"] = pending(reason="ContainerCreating")
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
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
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
