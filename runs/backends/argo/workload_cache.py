"""The Kueue Workloads of the runs' pods, kept from one paginated list and a watch
(``informer``), each trimmed to what the reasons of a status read of it.

Kueue makes one Workload for each pod it manages, labelled with the pod's uid
(``JOB_UID_LABEL``); the reasons of a status (``pod_reasons``) read the Workloads of the pods
Kueue holds back, on every pass and page view. Read from here, they cost the API server nothing
that grows with the pods: one list (``PAGE_SIZE`` a page) when a process first needs them, then
the watch's events. A Workload is kept only with its name, its pod's uid and its conditions
(``slim``): not its pod template, so the memory one holds is bounded whatever its pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast

from kubernetes.watch import Watch

from runs.backends.argo.capacity import KUEUE_GROUP, KUEUE_VERSION
from runs.backends.argo.clients import Clients
from runs.backends.argo.informer import watch_arguments
from runs.backends.argo.namespace_cache import PAGE_SIZE, NamespaceCache

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label of a Kueue Workload naming the uid of its pod."""
PLURAL = "workloads"
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")


class WorkloadsUnknown(RuntimeError):
    """The Workloads are not known: the cache's first list has not gone through."""


def slim(workload: dict[str, Any]) -> dict[str, Any]:
    """A Workload (JSON) with only its name, its pod's uid and its conditions, in Kueue's
    shape (the pure ``status`` reads it unchanged)."""
    meta = workload.get("metadata") or {}
    labels = meta.get("labels") or {}
    conditions = (workload.get("status") or {}).get("conditions") or []
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "labels": {k: v for k, v in labels.items() if k == JOB_UID_LABEL},
        },
        "status": {
            "conditions": [
                {key: c[key] for key in CONDITION_FIELDS if key in c} for c in conditions
            ]
        },
    }


class WorkloadCache(NamespaceCache):
    """The Workloads of the pods of the runs' namespace by name (those Kueue's pod integration
    made: labelled with their pod's uid)."""

    def __init__(self, clients: Clients, **settings: Any) -> None:
        super().__init__(clients, slim, kind="workloads", **settings)

    def of_pods(self, uids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The Workloads of the pods of these uids, by pod uid; the first call in a process
        starts the cache and waits for its list. WorkloadsUnknown when the cache cannot answer:
        nothing stale is answered."""
        wanted = set(uids)
        if not wanted:
            return {}
        if not self.wait_synced(self.sync_wait_s):
            raise WorkloadsUnknown("the Kueue Workloads are not known yet: their list failed")
        found = {}
        for workload in self.items().values():
            uid = workload["metadata"]["labels"].get(JOB_UID_LABEL)
            if uid in wanted:
                found[uid] = workload
        return found

    def _list_page(self, token: str | None) -> dict[str, Any]:
        """A page of the Workloads of the namespace's pods."""
        return cast(
            dict[str, Any],
            self.clients.custom.list_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                self.clients.namespace,
                PLURAL,
                label_selector=JOB_UID_LABEL,
                limit=PAGE_SIZE,
                _continue=token,
            ),
        )

    def _watch_from(self, resource_version: str) -> Iterator[dict[str, Any]]:
        """The events of the Workloads since a version; the server ends it after
        ``watch_timeout_s``, and a silent one is cut a bit later."""
        self._watch = watch = Watch()  # type: ignore[no-untyped-call]  # unannotated
        yield from watch.stream(  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
            self.clients.watch_api.list_namespaced_custom_object,
            KUEUE_GROUP,
            KUEUE_VERSION,
            self.clients.namespace,
            PLURAL,
            **watch_arguments(
                JOB_UID_LABEL,
                resource_version,
                self.watch_timeout_s,
                self.clients.calls.connect_timeout_s,
            ),
        )
