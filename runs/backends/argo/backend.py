"""The Argo backend: a run is an Argo Workflow on Kubernetes, its pods admitted by Kueue.

The Workflow is built by ``manifest`` and read by ``status``; this module submits, reads and
stops it, and hands the rest to one part each: the watch of Workflows (``watch``), the logs of
pods (``pod_logs``), the reasons of their pods (``pod_reasons``), what the cluster can hold
(``capacity``), the nodes and their reservation (``node_reservations``), the pods that run
(``placements``) and the images (``image_builds``); the Workflows and the pods are read from
caches a watch keeps (``watch``, ``pod_cache``, ``workload_cache``). See docs/cluster.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import Watch

from harness.tasktypes import TaskType
from runs.backends.argo.api import CallPolicy, ClusterUnavailable
from runs.backends.argo.capacity import CAPACITY_TTL_S, Capacity
from runs.backends.argo.clients import api_client, clients, missing_as_key_error
from runs.backends.argo.image_builds import BUILD_POLL_S, ImageBuilds
from runs.backends.argo.informer import SYNC_WAIT_S, watch_arguments
from runs.backends.argo.manifest import (
    GROUP,
    PLURAL,
    VERSION,
    runs_selector,
    workflow_manifest,
)
from runs.backends.argo.node_reservations import NodeReservations
from runs.backends.argo.placements import placements
from runs.backends.argo.pod_cache import PodCache
from runs.backends.argo.pod_logs import LOG_BYTES, PodLogs
from runs.backends.argo.pod_reasons import PodReasons
from runs.backends.argo.status import status_from_workflow
from runs.backends.argo.watch import PAGE_SIZE, WorkflowCache
from runs.backends.argo.workflow_limits import workflow_refusal
from runs.backends.argo.workload_cache import WorkloadCache
from runs.backends.base import (
    BackendStatus,
    ClusterConfig,
    KeptLogs,
    NodeInfo,
    Placement,
    PodLog,
    RunRecord,
    TaskPlan,
)
from runs.common.store import TaskFolder

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 300
WATCH_BACKOFF_S = 5.0
REASONS_TTL_S = 60.0
"""How long the reasons of a workflow's pods read for its status are taken as known while the
workflow does not change (the control loop's resync, ``SIMRUN_RESYNC_S``)."""
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""The ``Accept`` of a list of objects' metadata alone, as client-go's metadata client asks."""
METADATA_PAGE_SIZE = 500
"""Workflows per page of a list of their metadata: no node map, so a page stays small."""


class ArgoBackend:
    """Runs as Argo Workflows in one namespace of a Kubernetes cluster."""

    name = "argo"
    runs_images = True
    extra_workers = True
    reserves_nodes = True
    no_reservations = ""
    enforces_memory = True
    logs_in_store = False

    def __init__(
        self,
        *,
        cluster: ClusterConfig,
        api: ApiClient,
        store: Path,
        build_poll_s: float = BUILD_POLL_S,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        calls: CallPolicy | None = None,
        capacity_ttl_s: float = CAPACITY_TTL_S,
        reasons_ttl_s: float = REASONS_TTL_S,
        watch_backoff_s: float = WATCH_BACKOFF_S,
        log_bytes: int = LOG_BYTES,
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.clients = clients(api, cluster, calls or CallPolicy())
        self.watch_timeout_s = watch_timeout_s
        self.reasons_ttl_s = reasons_ttl_s
        self._checker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._watch: Watch | None = None
        self._cache = WorkflowCache(
            self._list_page, self._watch_from, status_from_workflow, backoff_s=watch_backoff_s
        )
        self.pods = PodCache(
            self.clients, backoff_s=watch_backoff_s, watch_timeout_s=watch_timeout_s
        )
        self.pod_logs = PodLogs(
            self.clients, store=store, cached=self._cache.get, pods=self.pods, log_bytes=log_bytes
        )
        self.workloads = WorkloadCache(
            self.clients, backoff_s=watch_backoff_s, watch_timeout_s=watch_timeout_s
        )
        self.reasons = PodReasons(self.clients, self.pods, self.workloads)
        self.capacity = Capacity(self.clients, ttl_s=capacity_ttl_s)
        self.node_reservations = NodeReservations(self.clients)
        self.builds = ImageBuilds(self.clients, poll_s=build_poll_s)

    @classmethod
    def from_settings(cls) -> ArgoBackend:
        """The backend of ``SIMRUN_CLUSTER``, with its kubeconfig or the in-cluster config."""
        from django.conf import settings

        from runs.backends import cluster_config

        cluster = cluster_config()
        return cls(
            cluster=cluster,
            api=api_client(cluster.kubeconfig),
            store=settings.SIMRUN_STORE,
            log_bytes=int(settings.SIMRUN_TASK_LOG_MB * 2**20),
        )

    @property
    def namespace(self) -> str:
        return self.cluster.namespace

    # Workflows

    def refusal(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str | None:
        """Why the run's Workflow is past what Argo and etcd hold (``workflow_limits``)."""
        manifest = workflow_manifest(record=record, plans=plans, types=types, cluster=cluster)
        return workflow_refusal(manifest) or None

    def submit(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str:
        """Create the run's Workflow; one that exists already is taken as submitted.

        ValueError when a task cannot run: no image, more than any node can hold or the
        ClusterQueue can admit, or an Argo or a Kueue simrun does not support
        (``versions``); or when the Workflow is past what Argo and etcd hold
        (``workflow_limits``). Its ``parallelism`` is what the queue could ever hold of it
        (``Capacity.parallelism``).
        """
        manifest = workflow_manifest(record=record, plans=plans, types=types, cluster=cluster)
        if refused := workflow_refusal(manifest):
            raise ValueError(refused)
        self.capacity.check_fits(plans)
        self.capacity.check_cluster(plans)
        if parallelism := self.capacity.parallelism(plans):
            manifest["spec"]["parallelism"] = parallelism
        name: str = manifest["metadata"]["name"]
        try:
            self.clients.custom.create_namespaced_custom_object(
                GROUP, VERSION, cluster.namespace, PLURAL, manifest
            )
        except ApiException as error:
            if error.status != 409:
                raise
            log.info("workflow %s exists already: taken as submitted", name)
        return name

    def status(self, name: str) -> BackendStatus:
        """The status of a Workflow; KeyError when it is gone (e.g. deleted by its TTL).

        Once ``versions`` started the watch's cache (``watch``), a Workflow it holds is
        read from it, without a request; one it has not seen (just created) is read by a GET.
        While a node is pending or an attempt failed, its pods (and their Kueue Workloads) are
        read too, for why each waits and why each failed attempt was ended: from the cache,
        once per version of the Workflow and ``reasons_ttl_s``. A status without those reasons
        is better than none, so a failure to read them is only logged.
        """
        cached = self._cache.get(name)
        if cached is None or cached.status is None:
            return self.reasons.with_reasons(name, status_from_workflow(self._workflow(name)))[0]
        now = time.monotonic()
        if cached.reasons is None or now - cached.reasons_at >= self.reasons_ttl_s:
            status, complete = self.reasons.with_reasons(name, cached.status)
            if not complete:
                return status
            cached.reasons, cached.reasons_at = status, now
        return cached.reasons.model_copy(deep=True)

    def versions(self, names: list[str]) -> dict[str, str]:
        """The ``resourceVersion`` of each named Workflow (``ChangeSignal``): from the watch's
        cache, started by the first call in a process, once its first list went through
        (waited for up to ``SYNC_WAIT_S`` while it is one page); until then from a list of
        the Workflows' metadata alone, whose pages carry no node map. So a restarted
        service's first pass skips the runs whose rows hold their last poll, where the cache's
        first list of many large Workflows would be waited for or each read by a GET. Empty
        when neither list went through."""
        if self._cache.wait_one_page(SYNC_WAIT_S):
            return self._cache.versions(names)
        try:
            listed = self._listed_versions()
        except (ApiException, ClusterUnavailable) as error:  # as an empty cache: each is read
            log.warning("listing the versions of the workflows failed: %s", error)
            return {}
        return {name: listed[name] for name in names if name in listed}

    def cancel(self, name: str) -> None:
        """Terminate a Workflow: no pod runs any more; KeyError when it is gone."""
        self._shutdown(name, "Terminate")

    def stop(self, name: str) -> None:
        """Stop a Workflow whose run is decided: pending pods (Kueue's too) are deleted."""
        self._shutdown(name, "Stop")

    def _workflow(self, name: str) -> dict[str, Any]:
        with missing_as_key_error(name):
            # A custom object comes as its JSON document, which the client types as object.
            return cast(
                dict[str, Any],
                self.clients.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name
                ),
            )

    def _shutdown(self, name: str, strategy: str) -> None:
        # A dict body goes out as a JSON merge patch, as `argo stop` sends it.
        with missing_as_key_error(name):
            self.clients.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, {"spec": {"shutdown": strategy}}
            )

    # Pods

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        return self.pod_logs.logs(name, task_id, tail_lines)

    @classmethod
    def render(
        cls,
        record: RunRecord,
        plans: Mapping[str, TaskPlan],
        types: Mapping[str, TaskType],
        cluster: ClusterConfig,
    ) -> dict[str, Any]:
        """The Workflow ``submit`` would create (``Renders``)."""
        return workflow_manifest(record=record, plans=plans, types=types, cluster=cluster)

    def keep_logs(self, name: str, task_id: str, folder: TaskFolder) -> KeptLogs:
        return self.pod_logs.keep_logs(name, task_id, folder)

    def placements(self) -> list[Placement]:
        """The pods of the runs that have not terminated, from the pod cache (``pod_cache``):
        a page asks the API server nothing once the process's first read listed them."""
        return placements(self.pods.pods())

    def describe(self) -> list[str]:
        return []

    def isolation_problem(self, owner: int | None = 0, kind: str = "split") -> str | None:
        return None  # each pod is isolated by the cluster

    # Nodes and what they hold

    def choose_node(self, plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()) -> str:
        return self.node_reservations.choose_node(plans, taken=taken)

    def nodes(self) -> list[NodeInfo]:
        return self.node_reservations.nodes()

    def reserve(self, node: str, run_id: str) -> None:
        self.node_reservations.reserve(node, run_id)

    def unreserve(self, node: str, run_id: str) -> None:
        self.node_reservations.unreserve(node, run_id)

    @property
    def max_cores(self) -> int | None:
        return self.capacity.max_cores

    @property
    def max_memory_gb(self) -> float | None:
        return self.capacity.max_memory_gb

    @property
    def largest_node(self) -> str:
        return self.capacity.largest_node

    # Images

    def build_image(self, context: Path, ref: str) -> None:
        self.builds.build_image(context, ref)

    def has_image(self, ref: str) -> bool:
        return self.builds.has_image(ref)

    def image_digest(self, ref: str) -> str | None:
        """The digest the registry has for ``ref``: part of the key of a task run in it."""
        return self.builds.image_digest(ref)

    # Change notifications: the one watch of Workflows

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on every change of a run's Workflow, from the watch of the status
        cache (``watch``), started here if it was not.

        The first call (the Celery worker's start) also checks the cluster's versions
        (``Capacity.check_at_start``) in a thread of its own, so a cluster that is away does not
        hold the worker's start."""
        with self._lock:
            self._cache.subscribe(callback)
            if self._checker is None:
                self._checker = threading.Thread(
                    target=self.capacity.check_at_start, name="simrun-argo-check", daemon=True
                )
                self._checker.start()
        self._cache.start()

    def close(self) -> None:
        """End the watches."""
        self._cache.close()
        self.pods.close()
        self.workloads.close()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
        self._cache.close(timeout_s=10)
        self.pods.close(timeout_s=10)
        self.workloads.close(timeout_s=10)

    @property
    def watching(self) -> bool:
        """Whether the watch of Workflows runs."""
        return self._cache.alive

    def _list_page(self, token: str | None) -> dict[str, Any]:
        """A page of the Workflows of the runs, for the status cache."""
        return self._workflows_page(token, PAGE_SIZE)

    def _listed_versions(self) -> dict[str, str]:
        """The ``resourceVersion`` of every Workflow of the runs, by name, from a list of
        their metadata alone (``PartialObjectMetadataList``), page by page."""
        found: dict[str, str] = {}
        token: str | None = None
        while True:
            page = self._workflows_page(token, METADATA_PAGE_SIZE, {"Accept": METADATA_LIST})
            for item in page.get("items") or []:
                found[item["metadata"]["name"]] = str(item["metadata"]["resourceVersion"])
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return found

    def _workflows_page(
        self, token: str | None, limit: int, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """A page of the Workflows of the runs (of this service's Argo controller:
        ``runs_selector``) from a ``continue`` token, as ``headers`` ask."""
        return cast(
            dict[str, Any],
            self.clients.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                label_selector=runs_selector(self.cluster),
                limit=limit,
                _continue=token,
                _headers=headers,
            ),
        )

    def _watch_from(self, resource_version: str) -> Iterator[dict[str, Any]]:
        """The events of the Workflows of the runs since a version, for the status cache; the
        server ends it after ``watch_timeout_s``, and a silent one is cut a bit later."""
        self._watch = watch = Watch()  # type: ignore[no-untyped-call]  # unannotated
        yield from watch.stream(  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
            self.clients.watch_api.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            **watch_arguments(
                runs_selector(self.cluster),
                resource_version,
                self.watch_timeout_s,
                self.clients.calls.connect_timeout_s,
            ),
        )
