"""Why a workflow's pods wait and why its failed attempts were ended, from the pods.

The Workflow says what ran and how it ended; its pods (from the ``pod_cache``: no request), and
their Kueue Workloads (from the ``workload_cache``: no request either), and for a pod that
cannot start its kubelet's events, say why: the pure ``status`` reads them into the status.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from runs.backends.argo.clients import Clients
from runs.backends.argo.pod_cache import PodCache
from runs.backends.argo.status import (
    creating_too_long,
    kubelet_warning,
    needs_workload,
    scaling_up,
    unschedulable_too_long,
    with_pods,
)
from runs.backends.argo.workload_cache import WorkloadCache
from runs.backends.base import BackendStatus

log = logging.getLogger(__name__)

STUCK_EVENT_PODS = 4
"""The most pods of a status whose events are read (pods past the start timeout that started
no container: ``creating_too_long``); the others fail without the kubelet's warning."""
STUCK_EVENTS_LIMIT = 20
"""The most events read of one such pod (its kubelet's warnings, deduplicated by count)."""


class PodReasons:
    """The reasons of a workflow's pending and failed pods, read for its status."""

    def __init__(self, clients: Clients, pods: PodCache, workloads: WorkloadCache) -> None:
        self.clients = clients
        self.pods = pods
        self.workloads = workloads

    def with_reasons(self, name: str, status: BackendStatus) -> tuple[BackendStatus, bool]:
        """The status with the reasons of its pending and failed pods; whether they were read."""
        if not status.failed and "Pending" not in status.tasks.values():
            return status, True
        try:
            pods = self.pods.of_workflow(name)
            workloads = self._workloads_of(pods)
            timeout_s, now = self.clients.cluster.pod_start_timeout_s, time.time()
            stuck = [p for p in pods if creating_too_long(p, now, timeout_s)]
            warnings = {p["metadata"]["name"]: self._warning(p) for p in stuck[:STUCK_EVENT_PODS]}
            found = with_pods(
                status,
                name,
                pods,
                workloads,
                now=now,
                start_timeout_s=timeout_s,
                warnings=warnings,
                scaling=self._scaling(pods, workloads, now, timeout_s),
            )
            return found, True
        except Exception as error:
            log.warning("the reasons of the pods of %s are unknown for now: %s", name, error)
            return status, False

    def _scaling(
        self,
        pods: list[dict[str, Any]],
        workloads: dict[str, dict[str, Any]],
        now: float,
        timeout_s: float,
    ) -> frozenset[str]:
        """The pods no node fitted within the start timeout for which the cluster autoscaler
        is adding a node (``scaling_up``: the events of at most ``STUCK_EVENT_PODS``)."""
        late = [
            p for p in pods if unschedulable_too_long(p, workloads.get(_uid(p)), now, timeout_s)
        ]
        return frozenset(
            p["metadata"]["name"] for p in late[:STUCK_EVENT_PODS] if scaling_up(self._events(p))
        )

    def _warning(self, pod: dict[str, Any]) -> str:
        """The kubelet's last warning of a pod ("" when there is none or it cannot be read)."""
        return kubelet_warning(self._events(pod, ",type=Warning"))

    def _events(self, pod: dict[str, Any], only: str = "") -> list[dict[str, Any]]:
        """The events of a pod ([] when they cannot be read): one list, field-selected by its
        uid (and ``only``), at most ``STUCK_EVENTS_LIMIT``."""
        meta = pod["metadata"]
        which = f"involvedObject.uid={meta['uid']}" if meta.get("uid") else ""
        which = which or f"involvedObject.name={meta['name']}"
        try:
            events: Any = self.clients.core.list_namespaced_event(
                self.clients.namespace,
                field_selector=f"{which}{only}",
                limit=STUCK_EVENTS_LIMIT,
                _preload_content=False,
            )
        except ApiException as error:
            log.warning("the events of pod %s are unknown: %s", meta["name"], error.reason)
            return []
        found: list[dict[str, Any]] = json.loads(events.data).get("items") or []
        return found

    def _workloads_of(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The Kueue Workloads of the pods Kueue holds back or admitted to no node that fits
        (``needs_workload``), by pod uid."""
        return self.workloads.of_pods(
            p["metadata"]["uid"] for p in pods if needs_workload(p) and p["metadata"].get("uid")
        )


def _uid(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))
