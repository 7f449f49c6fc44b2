"""The Argo backend: a run is an Argo Workflow on Kubernetes, its pods admitted by Kueue.

The Workflow is built by ``manifest`` and read by ``status``; this module speaks to
the Kubernetes API with the official client (``CustomObjectsApi`` for workflows, ``CoreV1Api``
for pods, logs and nodes), builds images with an in-cluster Kaniko pod (``build``) and
asks the registry for images (``registry``). See docs/cluster.md.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar, cast

from kubernetes import config
from kubernetes.client import (
    ApiClient,
    ApisApi,
    AppsV1Api,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
    V1DeleteOptions,
    V1Preconditions,
)
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from kubernetes.watch import Watch

from harness import logcap
from harness.tasktypes import TaskType
from runs.backends import logs
from runs.backends.argo.api import CallPolicy, Resilient, Silence, without_pool_retries
from runs.backends.argo.build import (
    JOINER_PREFIX,
    build_namespace,
    build_pod,
    build_pod_name,
    context_config_map,
)
from runs.backends.argo.manifest import (
    DAG_TASK_LABEL,
    GROUP,
    PLURAL,
    RESERVED_KEY,
    RUN_LABEL,
    TASK_LABEL,
    VERSION,
    workflow_manifest,
)
from runs.backends.argo.nodes import RESERVABLE, reservable, usable
from runs.backends.argo.registry import has_image, registry_credentials
from runs.backends.argo.status import (
    NODE_NAME,
    creating_too_long,
    kubelet_warning,
    mount_failure,
    needs_workload,
    start_failure,
    status_from_workflow,
    with_pods,
)
from runs.backends.argo.versions import (
    ARGO_MINIMUM,
    DOC,
    KUEUE_API,
    argo_found,
    argo_refusal,
    kueue_refusal,
    main_caps,
    pod_requests,
    queue_quota,
    served_groups,
)
from runs.backends.argo.watch import PAGE_SIZE, WorkflowCache
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
from runs.backends.nodes import choose_node
from runs.common.store import TaskFolder, task_parts

log = logging.getLogger(__name__)
Limit = TypeVar("Limit", int, float)

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
MISSING_LOGS = {
    404: "its pod was deleted (by the pod GC or a preemption) before its log was kept",
    400: "its container never started",
}
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
STAGE_CONTAINER = "stage"
"""The init container that stages a command task's inputs (``manifest``)."""
TERMINATED = frozenset({"Succeeded", "Failed"})
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label of a Kueue Workload naming the uid of its pod."""
CONFLICT_RETRIES = 10
"""Read-modify-write attempts on a node whose resourceVersion keeps changing."""
WATCH_TIMEOUT_S = 300
WATCH_BACKOFF_S = 5.0
WATCH_SLACK_S = 30
BUILD_POLL_S = 5.0
GIB = 2**30
CAPACITY_TTL_S = 300.0
"""How long the sizes of the nodes are taken as known: nodes come and go, rarely."""
CAPACITY_RETRY_S = 30.0
"""How soon the sizes are asked again after the cluster did not answer."""
LOG_BYTES = 64 << 20
"""The bytes of a pod's log read and kept (``SIMRUN_TASK_LOG_MB``): its head and tail beyond."""
REASONS_TTL_S = 60.0
"""How long the reasons of a workflow's pods read for its status are taken as known while the
workflow does not change (the control loop's resync, ``SIMRUN_RESYNC_S``)."""
STUCK_EVENT_PODS = 4
"""The most pods of a status whose events are read (pods past the start timeout that started
no container: ``creating_too_long``); the others fail without the kubelet's warning."""
STUCK_EVENTS_LIMIT = 20
"""The most events read of one such pod (its kubelet's warnings, deduplicated by count)."""


def api_client(kubeconfig: str = "") -> ApiClient:
    """A client of the cluster: the kubeconfig named, else in-cluster, else ``~/.kube/config``."""
    if kubeconfig:
        client: ApiClient = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]  # kubernetes.config is unannotated
        return client
    configuration = Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # kubernetes.config is unannotated
    except config.ConfigException:
        client = config.new_client_from_config()  # type: ignore[no-untyped-call]  # kubernetes.config is unannotated
        return client
    return ApiClient(configuration)


class ArgoBackend:
    """Runs as Argo Workflows in one namespace of a Kubernetes cluster."""

    name = "argo"
    runs_images = True
    extra_workers = True
    reserves_nodes = True
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
        self.log_bytes = log_bytes
        self.calls = calls or CallPolicy()
        without_pool_retries(api)
        # Every call with a timeout and retried on transient errors; the watch alone is not.
        silence = Silence()
        self.core = cast(CoreV1Api, Resilient(CoreV1Api(api), self.calls, silence))
        self.custom = cast(CustomObjectsApi, Resilient(CustomObjectsApi(api), self.calls, silence))
        self.apps = cast(AppsV1Api, Resilient(AppsV1Api(api), self.calls, silence))
        self.apis = cast(ApisApi, Resilient(ApisApi(api), self.calls, silence))
        self._gate: tuple[str, dict[str, Decimal]] = ("", {})
        self._gate_at: float | None = None
        self._watch_api = CustomObjectsApi(api)
        once = replace(self.calls, tries=1, read_timeout_s=min(self.calls.read_timeout_s, 5.0))
        self._core_once = cast(CoreV1Api, Resilient(CoreV1Api(api), once, silence))
        self._custom_once = cast(CustomObjectsApi, Resilient(CustomObjectsApi(api), once, silence))
        self._quota: dict[str, Decimal] | None = None
        self._quota_at: float | None = None
        self._cluster_queue = cluster.queue
        self.capacity_ttl_s = capacity_ttl_s
        self._sizes: list[tuple[float, float]] = []
        self._unread: dict[tuple[str, str], dict[str, PodLog]] = {}
        """Terminated pods whose log read failed, by workflow and task (``logs``)."""
        self._sizes_at: float | None = None
        self.build_poll_s = build_poll_s
        self.watch_timeout_s = watch_timeout_s
        self._callbacks: list[Callable[[], None]] = []
        self._watcher: threading.Thread | None = None
        self._watch: Watch | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self.reasons_ttl_s = reasons_ttl_s
        self._informer_watch: Watch | None = None
        self._cache = WorkflowCache(
            self._list_page, self._watch_from, status_from_workflow, backoff_s=watch_backoff_s
        )

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
        (``versions``).
        """
        manifest = workflow_manifest(record=record, plans=plans, types=types, cluster=cluster)
        self._check_fits(plans)
        self._check_cluster(plans)
        name: str = manifest["metadata"]["name"]
        try:
            self.custom.create_namespaced_custom_object(
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
            return self._with_reasons(name, status_from_workflow(self._workflow(name)))[0]
        now = time.monotonic()
        if cached.reasons is None or now - cached.reasons_at >= self.reasons_ttl_s:
            status, complete = self._with_reasons(name, cached.status)
            if not complete:
                return status
            cached.reasons, cached.reasons_at = status, now
        return cached.reasons.model_copy(deep=True)

    def versions(self, names: list[str]) -> dict[str, str]:
        """The ``resourceVersion`` of each named Workflow from the watch's cache, started by the
        first call in a process (``ChangeSignal``): none until its first list went through."""
        self._cache.start()
        return self._cache.versions(names)

    def _with_reasons(self, name: str, status: BackendStatus) -> tuple[BackendStatus, bool]:
        """The status with the reasons of its pending and failed pods; whether they were read."""
        if not status.failed and "Pending" not in status.tasks.values():
            return status, True
        try:
            pods = self._pods_of(name)
            workloads = self._workloads_of(pods)
            timeout_s, now = self.cluster.pod_start_timeout_s, time.time()
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
            )
            return found, True
        except Exception as error:
            log.warning("the reasons of the pods of %s are unknown for now: %s", name, error)
            return status, False

    def _pods_of(self, name: str) -> list[dict[str, Any]]:
        """The pods of a workflow as the API server wrote them: its JSON, as the pure
        ``status`` reads it, not the client's models (which refuse a pod that lacks a
        field they require)."""
        response: Any = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{WORKFLOW_LABEL}={name}", _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(response.data).get("items") or []
        return items

    def _warning(self, pod: dict[str, Any]) -> str:
        """The kubelet's last warning of a pod ("" when there is none or it cannot be read):
        one list of its Warning events, field-selected, at most ``STUCK_EVENTS_LIMIT``."""
        meta = pod["metadata"]
        which = f"involvedObject.uid={meta['uid']}" if meta.get("uid") else ""
        which = which or f"involvedObject.name={meta['name']}"
        try:
            events: Any = self.core.list_namespaced_event(
                self.namespace,
                field_selector=f"{which},type=Warning",
                limit=STUCK_EVENTS_LIMIT,
                _preload_content=False,
            )
        except ApiException as error:
            log.warning("the events of pod %s are unknown: %s", meta["name"], error.reason)
            return ""
        return kubelet_warning(json.loads(events.data).get("items") or [])

    def _workloads_of(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The Kueue Workloads of the pods Kueue holds back or admitted to no node that fits
        (``needs_workload``), by pod uid."""
        gated = sorted(
            p["metadata"]["uid"] for p in pods if needs_workload(p) and p["metadata"].get("uid")
        )
        if not gated:
            return {}
        listing = cast(
            dict[str, Any],
            self.custom.list_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                self.namespace,
                "workloads",
                label_selector=f"{JOB_UID_LABEL} in ({','.join(gated)})",
            ),
        )
        return {
            w["metadata"]["labels"][JOB_UID_LABEL]: w
            for w in listing.get("items") or []
            if JOB_UID_LABEL in (w["metadata"].get("labels") or {})
        }

    def cancel(self, name: str) -> None:
        """Terminate a Workflow: no pod runs any more; KeyError when it is gone."""
        self._shutdown(name, "Terminate")

    def stop(self, name: str) -> None:
        """Stop a Workflow whose run is decided: pending pods (Kueue's too) are deleted."""
        self._shutdown(name, "Stop")

    def _workflow(self, name: str) -> dict[str, Any]:
        with _missing_as_key_error(name):
            # A custom object comes as its JSON document, which the client types as object.
            return cast(
                dict[str, Any],
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name
                ),
            )

    def _shutdown(self, name: str, strategy: str) -> None:
        # A dict body goes out as a JSON merge patch, as `argo stop` sends it.
        with _missing_as_key_error(name):
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, {"spec": {"shutdown": strategy}}
            )

    # Pods

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        """The logs of the ``main`` container of every pod of a task still there, oldest first.

        A terminated pod whose log the store keeps already comes without its text (the store
        has it), so keeping logs as pods end reads each log once. A terminated pod whose log
        cannot be read any more (deleted, never started) comes with ``missing`` saying why;
        one that cannot be read now is left for a later call: one pod never stops the others.
        """
        selector = f"{WORKFLOW_LABEL}={name},{TASK_LABEL}={task_id}"
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        pods.sort(key=_created)
        run_id = name.removeprefix("simrun-")
        kept = set(logs.kept(TaskFolder(self.store, task_parts(run_id, task_id))))
        found = []
        for pod in pods:
            # What the API server returns has metadata and a name.
            assert pod.metadata is not None and pod.metadata.name is not None
            node = (pod.metadata.annotations or {}).get(NODE_NAME_ANNOTATION, "")
            node = node.removeprefix(f"{name}.")
            match = NODE_NAME.match(node)
            attempt = int(match["attempt"]) if match and match["attempt"] else _attempt(pod)
            phase = pod.status.phase if pod.status else None
            entry = PodLog(
                node=node, pod=pod.metadata.name, text="", done=phase in TERMINATED, attempt=attempt
            )
            if entry.done and logs.log_name(entry) in kept:
                found.append(entry)
                continue
            try:
                entry.text = self._pod_log(pod.metadata.name, tail_lines)
            except ApiException as error:
                if error.status in (400, 404) and entry.done:
                    entry.missing = MISSING_LOGS[error.status]
                elif error.status == 404:
                    continue  # deleted since the list
                elif error.status != 400:  # 400: its container has not started yet
                    log.warning("the log of pod %s is not readable now: %s", entry.pod, error)
                    if entry.done:
                        entry.unread = f"{error.status} {error.reason}".strip()
                    entry.done = False  # not kept yet: asked again at the next call
            if entry.done and STAGE_CONTAINER in _init_containers(pod):
                self._with_stage(entry, tail_lines)
            found.append(entry)
        return self._unread_since(name, task_id, found)

    def _with_stage(self, entry: PodLog, tail_lines: int | None) -> None:
        """Put the log of a command task's ``stage`` init container before its ``main``'s:
        when the staging failed, main never started, and the stage's log says why."""
        try:
            stage: str = self.core.read_namespaced_pod_log(
                entry.pod,
                self.namespace,
                container=STAGE_CONTAINER,
                tail_lines=tail_lines,
                limit_bytes=self.log_bytes // 4,
            )
        except ApiException as error:
            log.info("the stage log of pod %s is not readable: %s", entry.pod, error)
            return
        if not stage:
            return
        main = f"(none: {entry.missing})\n" if entry.missing else entry.text
        entry.text = (
            f"[simrun] the log of stage, which staged the inputs:\n{stage.rstrip()}\n"
            f"[simrun] the log of main:\n{main}"
        )
        entry.missing = ""

    def _pod_log(self, pod: str, tail_lines: int | None) -> str:
        """The log of a pod's ``main`` container within ``log_bytes``: its last lines, or the
        whole log, or, when it is longer, its head and its last lines (``logcap.cut``): as
        many as an eighth of the budget holds at the head's length of a line (the API cuts a
        tail from its first bytes), at most a quarter of the budget."""
        text: str = self.core.read_namespaced_pod_log(
            pod, self.namespace, container="main", tail_lines=tail_lines, limit_bytes=self.log_bytes
        )
        if tail_lines is not None or len(text.encode()) < self.log_bytes:
            return text
        head = text.encode()[: self.log_bytes // 2].decode(errors="ignore")
        per_line = max(1, len(head) // max(1, head.count("\n")))
        tail: str = self.core.read_namespaced_pod_log(
            pod,
            self.namespace,
            container="main",
            tail_lines=max(1, self.log_bytes // 8 // per_line),
            limit_bytes=self.log_bytes // 4,
        )
        return logcap.cut(head, tail)

    def _unread_since(self, name: str, task_id: str, found: list[PodLog]) -> list[PodLog]:
        """``found``, with a missing entry for each terminated pod whose log read failed at an
        earlier call and which is gone since: its log can never be kept, and the store says why.

        What it remembers lives in this process only: after a restart such a pod is unknown.
        """
        key = (name, task_id)
        earlier = self._unread.pop(key, {})
        listed = {entry.pod for entry in found}
        for pod, entry in earlier.items():
            if pod not in listed:
                why = (
                    f"its pod was deleted before its log could be read (last read: {entry.unread})"
                )
                found.append(entry.model_copy(update={"done": True, "unread": "", "missing": why}))
        unread = {entry.pod: entry for entry in found if entry.unread}
        if unread:
            self._unread[key] = unread
        return found

    def placements(self) -> list[Placement]:
        """Every pod of a run that has not terminated, with its node, requests and worker."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=RUN_LABEL).items
        found = []
        for pod in pods:
            # What the API server returns has metadata and a name, and a pod has its spec.
            assert pod.metadata is not None and pod.metadata.name is not None
            assert pod.spec is not None
            labels = pod.metadata.labels or {}
            phase = (pod.status.phase if pod.status else None) or "Pending"
            if phase in TERMINATED or WORKFLOW_LABEL not in labels:
                continue
            requests = [
                (c.resources.requests or {}) if c.resources else {} for c in pod.spec.containers
            ]
            env = _main_env(pod)
            found.append(
                Placement(
                    workflow=labels[WORKFLOW_LABEL],
                    dag_task=labels.get(DAG_TASK_LABEL, ""),
                    pod=pod.metadata.name,
                    node=pod.spec.node_name,
                    phase=phase,
                    cores=float(sum(_quantity(r.get("cpu", "0")) for r in requests)),
                    memory_gb=float(sum(_quantity(r.get("memory", "0")) for r in requests)) / GIB,
                    worker=env.get("SIMRUN_WORKER") or None,
                    attempt=_attempt(pod),
                )
            )
        return found

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
        """Copy the logs of the task's pods that terminated into the store, each once."""
        pods = self.logs(name, task_id)
        return KeptLogs(complete=logs.keep(folder, pods), unread=any(p.unread for p in pods))

    def describe(self) -> list[str]:
        return []

    def isolation_problem(self, owner: int | None = 0, kind: str = "split") -> str | None:
        return None  # each pod is isolated by the cluster

    # Nodes

    def choose_node(self, plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()) -> str:
        return choose_node(self.nodes(), plans, taken=taken, reservable=RESERVABLE)

    def nodes(self) -> list[NodeInfo]:
        """The nodes the runs' pods may use (those of the node selector), with their holder and
        whether a run may reserve them (``nodes``)."""
        found = []
        for node in self._listed_nodes():
            # What the API server returns has metadata and a name.
            assert node.metadata is not None and node.metadata.name is not None
            labels = node.metadata.labels or {}
            taints = (node.spec.taints if node.spec else None) or []
            cores, memory_gb = _allocatable(node)
            conditions = (node.status.conditions if node.status else None) or []
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
            found.append(
                NodeInfo(
                    name=node.metadata.name,
                    cores=cores,
                    memory_gb=memory_gb,
                    ready=ready and not (node.spec and node.spec.unschedulable),
                    reserved_by=_holder(node),
                    labels=labels,
                    reservable=reservable(labels, taints, node_selector=self.cluster.node_selector),
                )
            )
        return found

    def _listed_nodes(self, core: CoreV1Api | None = None) -> list[Any]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.cluster.node_selector.items()))
        return list((core or self.core).list_node(label_selector=selector or None).items)

    @property
    def max_cores(self) -> int | None:
        """The most cores a task's pod may ask: the whole cores of the largest node the runs'
        pods may use, or less, what the ClusterQueue's quota gives one pod beside Argo's wait
        container (``main_caps``); None when neither is known."""
        return _least(self._node_caps()[0], self._quota_caps()[0])

    @property
    def max_memory_gb(self) -> float | None:
        """The most GiB a task's pod may ask, the largest node's or the quota's for one pod
        (as ``max_cores``); None when neither is known."""
        return _least(self._node_caps()[1], self._quota_caps()[1])

    @property
    def largest_node(self) -> str:
        """What ``max_cores`` and ``max_memory_gb`` are, in a refusal's and a plan's words: the
        largest node, the ClusterQueue's quota for one pod, or either."""
        node, quota = self._node_caps(), self._quota_caps()
        by_quota = [
            q is not None and (n is None or q < n) for n, q in zip(node, quota, strict=True)
        ]
        named = (
            f"the quota of the ClusterQueue {self._cluster_queue} for one pod (beside Argo's "
            "wait container)"
        )
        if all(by_quota) or (any(by_quota) and None in node):
            return named
        return f"the largest node or {named}" if any(by_quota) else "the largest node"

    def _node_caps(self) -> tuple[int | None, float | None]:
        sizes = self.node_sizes()
        if not sizes:
            return None, None
        return int(max(c for c, _ in sizes)), math.floor(max(m for _, m in sizes) * 100) / 100

    def _quota_caps(self) -> tuple[int | None, float | None]:
        quota = self.pod_quota()
        return main_caps(quota) if quota is not None else (None, None)

    def pod_quota(self) -> dict[str, Decimal] | None:
        """What the ClusterQueue behind the runs' LocalQueue gives one pod (``queue_quota``),
        read at most every ``capacity_ttl_s`` with one quick try (a web request planning a run
        must not wait); the last known (or None) while it cannot be read."""
        now = time.monotonic()
        if self._quota_at is not None and now - self._quota_at < self.capacity_ttl_s:
            return self._quota
        self._quota_at = now
        try:
            self._quota = self._queue_quota(self._custom_once)
        except Exception as error:
            why = f"{error.status} {error.reason}" if isinstance(error, ApiException) else error
            log.warning("the quota of the runs' queue is unknown for now: %s", why)
            self._quota_at = now - self.capacity_ttl_s + min(CAPACITY_RETRY_S, self.capacity_ttl_s)
        return self._quota

    def node_sizes(self) -> list[tuple[float, float]]:
        """(cores, GiB) allocatable of each node the runs' pods may use, read at most every
        ``capacity_ttl_s``; the last known sizes (or none) while the cluster does not answer.

        One quick try: a web request planning a run must not wait for a cluster that is away.
        """
        now = time.monotonic()
        if self._sizes_at is not None and now - self._sizes_at < self.capacity_ttl_s:
            return self._sizes
        self._sizes_at = now
        try:
            nodes = self._listed_nodes(self._core_once)
        except Exception as error:
            log.warning("the sizes of the nodes are unknown for now: %s", error)
            self._sizes_at = now - self.capacity_ttl_s + min(CAPACITY_RETRY_S, self.capacity_ttl_s)
            return self._sizes
        sizes = [
            _allocatable(node)
            for node in nodes
            if usable(node.metadata.labels or {}, (node.spec.taints if node.spec else None) or [])
        ]
        self._sizes = [(c, m) for c, m in sizes if c > 0 and m > 0]  # no status yet: unknown
        return self._sizes

    def _check_fits(self, plans: Mapping[str, TaskPlan]) -> None:
        """ValueError, with the numbers, for a task that no node the pods may use can hold."""
        sizes = self.node_sizes()
        if not sizes:
            return
        for task_id, plan in sorted(plans.items()):
            if not any(plan.cores <= c and plan.memory_gb <= m for c, m in sizes):
                cores, memory_gb = max(c for c, _ in sizes), max(m for _, m in sizes)
                raise ValueError(
                    f"task {task_id} needs {plan.cores} cores and {plan.memory_gb:g} GiB on one "
                    f"node, which no node simrun may use has (the largest have {cores:g} cores "
                    f"and {memory_gb:.1f} GiB)"
                )

    def _check_cluster(self, plans: Mapping[str, TaskPlan]) -> None:
        """ValueError when the cluster's Argo or Kueue cannot run the plans: versions, then the
        ClusterQueue's quota for one pod. Read at most every ``capacity_ttl_s``."""
        now = time.monotonic()
        if self._gate_at is None or now - self._gate_at >= self.capacity_ttl_s:
            refusal = self._argo_refusal() or kueue_refusal(served_groups(self._api_groups()))
            self._gate = (refusal, {} if refusal else self._queue_quota())
            self._gate_at = now
        refusal, quota = self._gate
        if refusal:
            raise ValueError(refusal)
        queue = f"the ClusterQueue of the LocalQueue {self.cluster.queue}"
        scratch = self.cluster.scratch_gb
        if "ephemeral-storage" not in quota:
            raise ValueError(
                f"{queue} does not cover ephemeral-storage, which every pod requests for its "
                f"scratch directory (SIMRUN_SCRATCH_GB): Kueue would admit none of them; add it "
                f"to its coveredResources (docker/k8s/30-kueue.yaml)"
            )
        cores, memory_gb = quota.get("cpu", Decimal(0)), quota.get("memory", Decimal(0)) / GIB
        for task_id, plan in sorted(plans.items()):
            # The retry after a kill for memory is a pod of its own, Kueue admits it anew.
            largest = max(plan.memory_gb, plan.retry_memory_gb)
            requests = pod_requests(plan.cores, largest, scratch)
            if any(amount > quota.get(name, Decimal(0)) for name, amount in requests.items()):
                retry = (
                    f" ({plan.retry_memory_gb:g} GiB for its retry after a kill for memory)"
                    if plan.retry_memory_gb > plan.memory_gb
                    else ""
                )
                raise ValueError(
                    f"task {task_id} needs {plan.cores} cores, {plan.memory_gb:g} GiB{retry} "
                    f"and {scratch} GiB of scratch in one pod, beside Argo's wait container "
                    f"(0.01 cores, 64 MiB): more than {queue} admits for one pod "
                    f"({cores:g} cores, {float(memory_gb):.1f} GiB, "
                    f"{float(quota['ephemeral-storage'] / GIB):g} GiB): Kueue would hold it "
                    "forever"
                )

    def _argo_refusal(self) -> str:
        """Why Argo's controller does not do, "" when it does."""
        return argo_refusal(self._argo_found())

    def _argo_found(self) -> str:
        """The version of Argo's controller: SIMRUN_ARGO_VERSION, else the image of its
        Deployment, else why that cannot be read."""
        if self.cluster.argo_version:
            return self.cluster.argo_version
        namespace, _, name = self.cluster.argo_controller.partition("/")
        try:
            deployment: Any = self.apps.read_namespaced_deployment(
                name, namespace, _preload_content=False
            )
        except ApiException as error:
            if error.status not in (403, 404):
                raise
            return f"its Deployment {self.cluster.argo_controller}: {error}"
        containers = json.loads(deployment.data)["spec"]["template"]["spec"]["containers"]
        return str(containers[0].get("image", ""))

    def check_at_start(self) -> None:
        """Say in the log, as the control loop starts, whether the cluster's Argo and Kueue
        are ones simrun runs on: what it found, what it needs and the doc; an error for each
        that is not (every submission is refused until it is fixed, ``_check_cluster``)."""
        try:
            argo = self._argo_found()
            groups = served_groups(self._api_groups())
        except Exception as error:
            why = f"{error.status} {error.reason}" if isinstance(error, ApiException) else error
            log.warning(
                "cannot check the versions of Argo and Kueue now (%s): they are checked before "
                "each submission, see %s",
                why,
                DOC,
            )
            return
        refusals = [r for r in (argo_refusal(argo), kueue_refusal(groups)) if r]
        for refusal in refusals:
            log.error("%s: every run will fail at its submission until this is fixed", refusal)
        if not refusals:
            log.info(
                "the cluster runs Argo Workflows %s and its Kueue serves %s %s: simrun needs "
                "Argo %s or later and %s, see %s",
                argo_found(argo),
                KUEUE_GROUP,
                ", ".join(groups.get(KUEUE_GROUP) or []),
                ".".join(map(str, ARGO_MINIMUM)),
                KUEUE_API,
                DOC,
            )

    def _api_groups(self) -> dict[str, Any]:
        """The API groups the cluster serves (discovery, ``GET /apis``)."""
        response: Any = self.apis.get_api_versions(_preload_content=False)
        found: dict[str, Any] = json.loads(response.data)
        return found

    def _queue_quota(self, custom: CustomObjectsApi | None = None) -> dict[str, Decimal]:
        """What the ClusterQueue behind the runs' LocalQueue can give one pod."""
        custom = custom or self.custom
        local = cast(
            dict[str, Any],
            custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, self.namespace, "localqueues", self.cluster.queue
            ),
        )
        self._cluster_queue = str(local["spec"]["clusterQueue"])
        cluster_queue = cast(
            dict[str, Any],
            custom.get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", self._cluster_queue
            ),
        )
        return queue_quota(cluster_queue)

    def reserve(self, node: str, run_id: str) -> None:
        """Taint ``simrun/reserved=<run>:NoExecute`` and label the node; other taints are kept.

        KeyError for an unknown node; ValueError when another run holds it.
        """

        def reserved(current: Any) -> dict[str, Any] | None:
            holder = _holder(current)
            if holder not in (None, run_id):
                raise ValueError(f"node {node} is reserved by run {holder}")
            taints = self._taints(current)
            mine = {"key": RESERVED_KEY, "value": run_id, "effect": "NoExecute"}
            labelled = (current.metadata.labels or {}).get(RESERVED_KEY) == run_id
            if labelled and any(_is_reservation(t, run_id) for t in taints):
                return None
            kept = [t for t in taints if t.get("key") != RESERVED_KEY]
            return _node_patch(current, labels={RESERVED_KEY: run_id}, taints=[*kept, mine])

        self._update_node(node, reserved)

    def unreserve(self, node: str, run_id: str) -> None:
        """Remove this run's taint and label; another run's reservation is left as it is.

        KeyError for an unknown node.
        """

        def released(current: Any) -> dict[str, Any] | None:
            taints = self._taints(current)
            kept = [t for t in taints if not _is_reservation(t, run_id)]
            labelled = (current.metadata.labels or {}).get(RESERVED_KEY) == run_id
            if len(kept) == len(taints) and not labelled:
                return None
            labels = {RESERVED_KEY: None} if labelled else {}
            return _node_patch(current, labels=labels, taints=kept)

        self._update_node(node, released)

    def _taints(self, node: Any) -> list[dict[str, Any]]:
        taints = (node.spec.taints if node.spec else None) or []
        return [self.core.api_client.sanitize_for_serialization(t) for t in taints]

    def _update_node(self, node: str, change: Callable[[Any], dict[str, Any] | None]) -> None:
        """Read, change and patch a node guarded by its resourceVersion; retry on 409."""
        for _ in range(CONFLICT_RETRIES):
            try:
                current = self.core.read_node(node)
                body = change(current)
                if body is None:
                    return
                self.core.patch_node(node, body)
                return
            except ApiException as error:
                if error.status == 404:
                    raise KeyError(node) from None
                if error.status != 409:
                    raise
                log.info("node %s changed meanwhile; reading it again", node)
        raise RuntimeError(f"node {node} kept changing: {CONFLICT_RETRIES} conflicting writes")

    # Change notifications

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on every change of a run's Workflow (a watch in a daemon thread).

        The first call starts the control loop's watch (the Celery worker's start): the
        cluster's versions are checked then (``check_at_start``), in that thread, so a
        cluster that is away does not hold the worker's start."""
        with self._lock:
            self._callbacks.append(callback)
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._start_watching, name="simrun-argo-watch", daemon=True
                )
                self._watcher.start()

    def _start_watching(self) -> None:
        self.check_at_start()
        self._watch_workflows()

    def close(self) -> None:
        """End the watch of ``subscribe`` and the one of the status cache."""
        self._closed.set()
        self._cache.close()
        for watch in (self._watch, self._informer_watch):
            if watch is not None:
                watch.stop()  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
        if self._watcher is not None:
            self._watcher.join(timeout=10)

    def _watch_workflows(self) -> None:
        resource_version: str | None = None
        while not self._closed.is_set():
            try:
                # List, then watch from the list's version: only changes wake the subscribers.
                resource_version = resource_version or self._list_version()
                for _ in self._events(resource_version):
                    resource_version = (self._watch and self._watch.resource_version) or None
                    for callback in list(self._callbacks):
                        try:
                            callback()
                        except Exception:
                            log.exception("a subscriber of the Argo backend failed")
            except ApiException as error:
                if error.status == 410:
                    resource_version = None  # too old: start again from the present
                    continue
                log.warning("watch of workflows failed: %s", error)
                self._closed.wait(WATCH_BACKOFF_S)
            except Exception:
                if not self._closed.is_set():
                    log.exception("watch of workflows failed")
                self._closed.wait(WATCH_BACKOFF_S)

    def _list_version(self) -> str:
        listing = cast(
            dict[str, Any],
            self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, label_selector=RUN_LABEL, limit=1
            ),
        )
        return str(listing["metadata"]["resourceVersion"])

    def _events(self, resource_version: str) -> Iterator[dict[str, Any]]:
        self._watch = Watch()  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
        for event in self._stream(self._watch, resource_version):
            if self._closed.is_set():
                return
            yield event

    def _list_page(self, token: str | None) -> dict[str, Any]:
        """A page of the Workflows of the runs, for the status cache."""
        return cast(
            dict[str, Any],
            self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                label_selector=RUN_LABEL,
                limit=PAGE_SIZE,
                _continue=token,
            ),
        )

    def _watch_from(self, resource_version: str) -> Iterator[dict[str, Any]]:
        """The events of the Workflows of the runs since a version, for the status cache."""
        self._informer_watch = watch = Watch()  # type: ignore[no-untyped-call]  # unannotated
        yield from self._stream(watch, resource_version, bookmarks=True)

    def _stream(
        self, watch: Watch, resource_version: str, *, bookmarks: bool = False
    ) -> Iterator[dict[str, Any]]:
        """The events of the Workflows of the runs since a version, on ``watch``; the server
        ends it after ``watch_timeout_s``, and a silent one is cut a bit later."""
        return cast(
            Iterator[dict[str, Any]],
            watch.stream(  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
                self._watch_api.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                label_selector=RUN_LABEL,
                timeout_seconds=self.watch_timeout_s,
                resource_version=resource_version,
                allow_watch_bookmarks=bookmarks,
                _request_timeout=(
                    self.calls.connect_timeout_s,
                    self.watch_timeout_s + WATCH_SLACK_S,
                ),
            ),
        )

    # Images

    def build_image(self, context: Path, ref: str) -> None:
        """Build a context (a folder of a few small files) with a Kaniko pod and push it as
        ``ref``; the context goes to the pod as a ConfigMap, in the build namespace.

        Builds of one image are joined by name: each call marks the ConfigMap as its own
        (``JOINER_PREFIX``), waits for the one build pod, and on its way out removes its mark;
        the last one out deletes the pod and the ConfigMap, so another run building the same
        image meanwhile never finds them gone. RuntimeError with the end of its log when the
        build fails.
        """
        name = build_pod_name(ref)
        config_map = context_config_map(context, ref, self.cluster)
        joiner = f"{JOINER_PREFIX}{secrets.token_hex(6)}"
        pod = build_pod(ref=ref, cluster=self.cluster)
        deadline = time.monotonic() + self.cluster.build_timeout_s
        self._join(config_map, joiner)
        try:
            while True:
                phase = self._build_phase(name, pod, config_map, joiner)
                if phase == "Succeeded":
                    return
                if phase == "Failed":
                    tail = self._log_tail(name)
                    log.warning("the build of %s failed; the end of its log:\n%s", ref, tail)
                    raise RuntimeError(f"the build of {ref} failed: {_build_error(tail)}")
                if phase == "Pending" and (why := self._build_cannot_start(name)):
                    raise RuntimeError(f"the build of {ref} cannot start: {why}")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the build of {ref} took longer than {self.cluster.build_timeout_s} s"
                    )
                time.sleep(self.build_poll_s)
        finally:
            self._leave(name, joiner)

    @property
    def build_namespace(self) -> str:
        return build_namespace(self.cluster)

    def _build_phase(
        self, name: str, pod: dict[str, Any], config_map: dict[str, Any], joiner: str
    ) -> str:
        """The phase of the build pod, created (with its context) when it does not exist."""
        try:
            current = self.core.read_namespaced_pod(name, self.build_namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            self._join(config_map, joiner)  # a pod is never made without its context
            self._create(self.core.create_namespaced_pod, pod)
            return "Pending"
        return (current.status.phase if current.status else None) or "Pending"

    def _build_cannot_start(self, name: str) -> str:
        """Why the build pod cannot start ("" while it may): an image it cannot pull, a
        configuration it cannot get, or (its events) a volume it cannot mount, such as the
        registry Secret missing from the build namespace."""
        response: Any = self.core.read_namespaced_pod(
            name, self.build_namespace, _preload_content=False
        )
        why = start_failure(json.loads(response.data))
        if why:
            return why
        events: Any = self.core.list_namespaced_event(
            self.build_namespace,
            field_selector=f"involvedObject.name={name}",
            _preload_content=False,
        )
        return mount_failure(json.loads(events.data).get("items") or [])

    def _join(self, config_map: dict[str, Any], joiner: str) -> None:
        """Mark the build's ConfigMap with this build's mark, creating it when it is missing."""
        name = config_map["metadata"]["name"]
        mark = {joiner: f"{time.time():.0f}"}
        body = {
            **config_map,
            "metadata": {**config_map["metadata"], "annotations": mark},
        }
        for _ in range(CONFLICT_RETRIES):
            try:
                self.core.create_namespaced_config_map(self.build_namespace, cast(Any, body))
                return
            except ApiException as error:
                if error.status != 409:
                    raise
            try:
                self.core.patch_namespaced_config_map(
                    name, self.build_namespace, {"metadata": {"annotations": mark}}
                )
                return
            except ApiException as error:
                if error.status != 404:  # deleted by the last one out meanwhile: create it
                    raise
        raise RuntimeError(f"the build context {name} kept appearing and disappearing")

    def _leave(self, name: str, joiner: str) -> None:
        """Remove this build's mark; the last one out (no fresh mark left) deletes the
        ConfigMap, unless a submission joined meanwhile, then the pod. A mark older than twice
        the build timeout is a process that died."""
        try:
            left = self.core.patch_namespaced_config_map(
                name, self.build_namespace, {"metadata": {"annotations": {joiner: None}}}
            )
        except ApiException as error:
            if error.status != 404:
                raise
            left = None
        marks = (left.metadata.annotations if left is not None and left.metadata else None) or {}
        oldest = time.time() - 2 * self.cluster.build_timeout_s
        others = [
            key
            for key, since in marks.items()
            if key.startswith(JOINER_PREFIX) and _number(since) > oldest
        ]
        if others:
            log.info("the build %s goes on for %d other submissions", name, len(others))
            return
        # The context first, and only as this call left it: a submission that joined since
        # marked it (a new resourceVersion), so the build is its own now and stays. Then the
        # pod: one that joins after this finds no context and makes both anew.
        version = left.metadata.resource_version if left is not None and left.metadata else None
        try:
            self.core.delete_namespaced_config_map(
                name,
                self.build_namespace,
                body=V1DeleteOptions(preconditions=V1Preconditions(resource_version=version)),
            )
        except ApiException as error:
            if error.status == 409:
                log.info("the build %s was joined as its last one left: it goes on", name)
                return
            if error.status != 404:
                raise
        self._delete(self.core.delete_namespaced_pod, name)

    def _create(self, create: Callable[..., Any], body: dict[str, Any]) -> None:
        """Create an object of the build; one that exists (made by another submission of the
        same image) is joined."""
        try:
            create(self.build_namespace, body)
        except ApiException as error:
            if error.status != 409:
                raise
            log.info("%s exists already: joined", body["metadata"]["name"])

    def _log_tail(self, name: str) -> str:
        try:
            text: str = self.core.read_namespaced_pod_log(
                name, self.build_namespace, container="main", tail_lines=50
            )
        except ApiException as error:
            return f"(no log: {error.status} {error.reason})"
        return text

    def _delete(self, delete: Callable[..., Any], name: str) -> None:
        try:
            delete(name, self.build_namespace)
        except ApiException as error:
            if error.status != 404:
                raise

    def has_image(self, ref: str) -> bool:
        """Whether the registry has ``ref`` (its HTTP API, with the configured credentials)."""
        auth = self.cluster.registry_auth_file
        # The file is an optional secret's: without it the registry is asked anonymously.
        found = bool(auth) and Path(auth).is_file()
        return has_image(ref, credentials=registry_credentials(auth) if found else None)


@contextmanager
def _missing_as_key_error(name: str) -> Iterator[None]:
    """A 404 of the API server as KeyError: the workflow does not exist (any more)."""
    try:
        yield
    except ApiException as error:
        if error.status == 404:
            raise KeyError(name) from None
        raise


def _number(text: str) -> float:
    """A mark's time, 0 when it is none."""
    try:
        return float(text)
    except ValueError:
        return 0.0


def _build_error(tail: str) -> str:
    """The line of a build log that says what went wrong: pip's last ``ERROR:``, else the
    last line, so a user reads one line, not a log."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["its log is empty"])[-1][:300]


def _least(*limits: Limit | None) -> Limit | None:
    """The least of the limits known (not None), None when none is."""
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def _quantity(value: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``4Gi``) as a number."""
    number: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]  # kubernetes.utils is unannotated
    return number


def _created(pod: Any) -> tuple[str, str]:
    """When a pod was created (RFC 3339 sorts in time), then its name."""
    created = pod.metadata.creation_timestamp
    return (created.isoformat() if created else "", pod.metadata.name)


def _init_containers(pod: Any) -> list[str]:
    return [c.name for c in (pod.spec.init_containers if pod.spec else None) or []]


def _main_env(pod: Any) -> dict[str, str]:
    for container in pod.spec.containers:
        if container.name == "main":
            return {e.name: e.value or "" for e in container.env or []}
    return {}


def _attempt(pod: Any) -> int | None:
    """The attempt of a pod from its ``SIMRUN_ATTEMPT``, None when it has none."""
    value = _main_env(pod).get("SIMRUN_ATTEMPT", "")
    return int(value) if value.isdigit() else None


def _allocatable(node: Any) -> tuple[float, float]:
    """The cores and GiB a node offers to pods."""
    allocatable = (node.status.allocatable if node.status else None) or {}
    cores = float(_quantity(allocatable.get("cpu", "0")))
    return cores, float(_quantity(allocatable.get("memory", "0"))) / GIB


def _holder(node: Any) -> str | None:
    """The run a node is reserved for: its label, else its taint."""
    label = (node.metadata.labels or {}).get(RESERVED_KEY)
    if label:
        return str(label)
    for taint in (node.spec.taints if node.spec else None) or []:
        if taint.key == RESERVED_KEY and taint.value:
            return str(taint.value)
    return None


def _is_reservation(taint: dict[str, Any], run_id: str) -> bool:
    return taint.get("key") == RESERVED_KEY and taint.get("value") == run_id


def _node_patch(
    node: Any, *, labels: Mapping[str, str | None], taints: list[dict[str, Any]]
) -> dict[str, Any]:
    """A strategic merge patch of a node's labels and (atomic) taints, guarded by its
    resourceVersion: a node written meanwhile makes it fail with 409 (reference §5.2)."""
    metadata: dict[str, Any] = {"resourceVersion": node.metadata.resource_version}
    if labels:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata, "spec": {"taints": taints}}
