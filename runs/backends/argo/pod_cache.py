"""The runs' pods, kept from one paginated list and a watch (``informer``), each trimmed to
the fields simrun reads of it.

The placements and nodes pages, the reasons of a status and the logs of a task read the pods
from here, so a page view or a pass costs the API server nothing that grows with the pods:
one list of the runs' pods (``PAGE_SIZE`` a page) when a process first reads them, then the
watch's events. A pod is kept as the JSON the API server wrote, in its shape (the pure
``status`` and ``placements`` read it unchanged), but only with what they and ``pod_logs`` read
(``slim``): no volumes, commands, images, nor environment beyond ``SIMRUN_WORKER`` and
``SIMRUN_ATTEMPT``, so the memory a pod holds is bounded whatever its spec.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kubernetes.watch import Watch

from runs.backends.argo.clients import Clients
from runs.backends.argo.informer import watch_arguments
from runs.backends.argo.manifest import runs_selector
from runs.backends.argo.namespace_cache import PAGE_SIZE, NamespaceCache

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
KEPT_ANNOTATIONS = frozenset({"workflows.argoproj.io/node-name"})
"""The annotations read of a pod: Argo's node name (its DAG node and attempt)."""
KEPT_ENV = frozenset({"SIMRUN_WORKER", "SIMRUN_ATTEMPT"})
"""The environment read of a pod's containers: the worker it runs, its attempt."""
CONTAINER_FIELDS = ("name", "resources")
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")
CONTAINER_STATUS_FIELDS = ("name", "state", "lastState")


class PodsUnknown(RuntimeError):
    """The runs' pods are not known: the cache's first list has not gone through."""


def _pick(obj: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The fields of ``obj`` that it has (an absent field stays absent, not None)."""
    return {key: obj[key] for key in fields if key in obj}


def slim(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod (JSON) with only the fields simrun reads of it, in the API server's shape."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    containers = []
    for container in spec.get("containers") or []:
        kept = _pick(container, CONTAINER_FIELDS)
        env = [e for e in container.get("env") or [] if e.get("name") in KEPT_ENV]
        if env:
            kept["env"] = [_pick(e, ("name", "value")) for e in env]
        containers.append(kept)
    kept_status = _pick(status, ("phase", "reason", "message"))
    if "conditions" in status:
        kept_status["conditions"] = [_pick(c, CONDITION_FIELDS) for c in status["conditions"]]
    for key in ("initContainerStatuses", "containerStatuses"):
        if key in status:
            kept_status[key] = [_pick(c, CONTAINER_STATUS_FIELDS) for c in status[key] or []]
    return {
        "metadata": {
            **_pick(meta, ("name", "uid", "creationTimestamp", "labels")),
            "annotations": {k: v for k, v in annotations.items() if k in KEPT_ANNOTATIONS},
        },
        "spec": {
            **_pick(spec, ("nodeName", "schedulingGates")),
            "initContainers": [_pick(c, ("name",)) for c in spec.get("initContainers") or []],
            "containers": containers,
        },
        "status": kept_status,
    }


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = pod["metadata"].get("labels") or {}
    return labels


class PodCache(NamespaceCache):
    """The runs' pods by name (those of this service's Argo controller: ``runs_selector``)."""

    def __init__(self, clients: Clients, **settings: Any) -> None:
        super().__init__(clients, slim, kind="pods", **settings)

    def pods(self) -> list[dict[str, Any]]:
        """Every run pod; the first call in a process starts the cache and waits for its list.

        PodsUnknown when the cache cannot answer (its list failed, or took past
        ``sync_wait_s``): nothing stale is answered."""
        if not self.wait_synced(self.sync_wait_s):
            raise PodsUnknown("the pods of the runs are not known yet: their list failed")
        return list(self.items().values())

    def of_workflow(self, name: str) -> list[dict[str, Any]]:
        """The pods of a Workflow (``pods``)."""
        return [p for p in self.pods() if _labels(p).get(WORKFLOW_LABEL) == name]

    def _list_page(self, token: str | None) -> dict[str, Any]:
        """A page of the runs' pods as the API server wrote them (JSON: the client's models
        cost seconds for a thousand pods)."""
        response: Any = self.clients.core.list_namespaced_pod(
            self.clients.namespace,
            label_selector=runs_selector(self.clients.cluster),
            limit=PAGE_SIZE,
            _continue=token,
            _preload_content=False,
        )
        page: dict[str, Any] = json.loads(response.data)
        return page

    def _watch_from(self, resource_version: str) -> Iterator[dict[str, Any]]:
        """The events of the runs' pods since a version, as JSON (``return_type``: no model
        is made of a pod); the server ends it after ``watch_timeout_s``, and a silent one is
        cut a bit later."""
        self._watch = watch = Watch(return_type="object")  # type: ignore[no-untyped-call]  # unannotated
        yield from watch.stream(  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
            self.clients.watch_core.list_namespaced_pod,
            self.clients.namespace,
            **watch_arguments(
                runs_selector(self.clients.cluster),
                resource_version,
                self.watch_timeout_s,
                self.clients.calls.connect_timeout_s,
            ),
        )
