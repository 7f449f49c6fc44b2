"""What the cluster can hold: the nodes' sizes, the ClusterQueue's quota for one pod, and the
versions of Argo and Kueue, each read at most every ``ttl_s``, and the refusal of a run that
does not fit them (a ValueError at its submission).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeVar, cast

from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from runs.backends.argo.clients import Clients
from runs.backends.argo.cohort_tree import Tree, cohort_of, quotas
from runs.backends.argo.kueue_quota import (
    Flavor,
    admits,
    covered,
    pods_at_once,
    queue_flavors,
    queue_quota,
)
from runs.backends.argo.node_reservations import listed_nodes
from runs.backends.argo.nodes import GIB, allocatable, usable
from runs.backends.argo.versions import (
    ARGO_MINIMUM,
    DOC,
    KUEUE_API,
    argo_found,
    argo_refusal,
    kueue_refusal,
    main_caps,
    pod_requests,
    served_groups,
)
from runs.backends.base import TaskPlan

log = logging.getLogger(__name__)
Limit = TypeVar("Limit", int, float)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
CAPACITY_TTL_S = 300.0
"""How long the sizes of the nodes are taken as known: nodes come and go, rarely."""
CAPACITY_RETRY_S = 30.0
"""How soon the sizes are asked again after the cluster did not answer."""
UNREADABLE = frozenset({403, 404})
"""The answers to the lists of a cohort's tree that leave it unknown, not failed: a Role that
does not allow them, a Kueue without the Cohort API."""


class Capacity:
    """The largest pod the cluster can run, and the gate a submission passes."""

    def __init__(self, clients: Clients, *, ttl_s: float = CAPACITY_TTL_S) -> None:
        self.clients = clients
        self.ttl_s = ttl_s
        self._gate: tuple[str, list[list[Flavor]]] = ("", [])
        self._gate_at: float | None = None
        self._quota: dict[str, Decimal] | None = None
        self._quota_at: float | None = None
        self._cluster_queue = clients.cluster.queue
        self._sizes: list[tuple[float, float]] = []
        self._sizes_at: float | None = None

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
        """What a task's ``main`` may ask of the largest node, Argo's ``wait`` beside it."""
        sizes = self.node_sizes()
        if not sizes:
            return None, None
        return main_caps(_offered(max(c for c, _ in sizes), max(m for _, m in sizes)))

    def _quota_caps(self) -> tuple[int | None, float | None]:
        quota = self.pod_quota()
        return main_caps(quota) if quota is not None else (None, None)

    def pod_quota(self) -> dict[str, Decimal] | None:
        """What the ClusterQueue behind the runs' LocalQueue gives one pod (``queue_quota``),
        read at most every ``capacity_ttl_s`` with one quick try (a web request planning a run
        must not wait); the last known (or None) while it cannot be read."""
        now = time.monotonic()
        if self._quota_at is not None and now - self._quota_at < self.ttl_s:
            return self._quota
        self._quota_at = now
        try:
            self._quota = queue_quota(self._queue_flavors(self.clients.custom_once))
        except Exception as error:
            why = f"{error.status} {error.reason}" if isinstance(error, ApiException) else error
            log.warning("the quota of the runs' queue is unknown for now: %s", why)
            self._quota_at = now - self.ttl_s + min(CAPACITY_RETRY_S, self.ttl_s)
        return self._quota

    def node_sizes(self) -> list[tuple[float, float]]:
        """(cores, GiB) allocatable of each node the runs' pods may use, read at most every
        ``capacity_ttl_s``; the last known sizes (or none) while the cluster does not answer.

        One quick try: a web request planning a run must not wait for a cluster that is away.
        """
        now = time.monotonic()
        if self._sizes_at is not None and now - self._sizes_at < self.ttl_s:
            return self._sizes
        self._sizes_at = now
        try:
            nodes = listed_nodes(self.clients, self.clients.core_once)
        except Exception as error:
            log.warning("the sizes of the nodes are unknown for now: %s", error)
            self._sizes_at = now - self.ttl_s + min(CAPACITY_RETRY_S, self.ttl_s)
            return self._sizes
        sizes = [
            allocatable(node)
            for node in nodes
            if usable(node.metadata.labels or {}, (node.spec.taints if node.spec else None) or [])
        ]
        self._sizes = [(c, m) for c, m in sizes if c > 0 and m > 0]  # no status yet: unknown
        return self._sizes

    def check_fits(self, plans: Mapping[str, TaskPlan]) -> None:
        """ValueError, with the numbers, for a task that no node the pods may use can hold."""
        sizes = self.node_sizes()
        if not sizes:
            return
        for task_id, plan in sorted(plans.items()):
            # The retry after a kill for memory is a pod of its own, placed anew.
            pod = pod_requests(plan.cores, max(plan.memory_gb, plan.retry_memory_gb), 0)
            if not any(_holds(_offered(c, m), pod) for c, m in sizes):
                cores, memory_gb = max(c for c, _ in sizes), max(m for _, m in sizes)
                raise ValueError(
                    f"task {task_id} needs {plan.cores} cores and {plan.memory_gb:g} GiB"
                    f"{_retry(plan)} on one node beside Argo's wait container (0.01 cores, "
                    f"64 MiB), which no node simrun may use has (the largest have {cores:g} "
                    f"cores and {memory_gb:.1f} GiB)"
                )

    def check_cluster(self, plans: Mapping[str, TaskPlan]) -> None:
        """ValueError when the cluster's Argo or Kueue cannot run the plans: versions, then the
        ClusterQueue's quota for one pod. Read at most every ``capacity_ttl_s``."""
        now = time.monotonic()
        if self._gate_at is None or now - self._gate_at >= self.ttl_s:
            refusal = self._argo_refusal() or kueue_refusal(served_groups(self._api_groups()))
            self._gate = (refusal, [] if refusal else self._queue_flavors())
            self._gate_at = now
        refusal, groups = self._gate
        if refusal:
            raise ValueError(refusal)
        queue = f"the ClusterQueue of the LocalQueue {self.clients.cluster.queue}"
        scratch = self.clients.cluster.scratch_gb
        if "ephemeral-storage" not in covered(groups):
            raise ValueError(
                f"{queue} does not cover ephemeral-storage, which every pod requests for its "
                f"scratch directory (SIMRUN_SCRATCH_GB): Kueue would admit none of them; add it "
                f"to its coveredResources (docker/k8s/30-kueue.yaml)"
            )
        offered = "; ".join(
            words for flavors in groups for flavor in flavors if (words := _flavor_words(flavor))
        )
        for task_id, plan in sorted(plans.items()):
            # The retry after a kill for memory is a pod of its own, Kueue admits it anew.
            largest = max(plan.memory_gb, plan.retry_memory_gb)
            requests = pod_requests(plan.cores, largest, scratch)
            if not admits(groups, requests):
                raise ValueError(
                    f"task {task_id} needs {plan.cores} cores, {plan.memory_gb:g} GiB"
                    f"{_retry(plan)} "
                    f"and {scratch} GiB of scratch in one pod, beside Argo's wait container "
                    f"(0.01 cores, 64 MiB): more than {queue} admits for one pod in any of its "
                    f"flavors (at most, flavor by flavor: {offered}): Kueue would hold it "
                    "forever"
                )

    def parallelism(self, plans: Mapping[str, TaskPlan]) -> int | None:
        """The most pods of a run the ClusterQueue could ever hold at once (``pods_at_once``:
        the smallest pod the plans make, counted flavor by flavor), None when that is no fewer
        than the run's pods or the quota is not known: Argo then makes no more pods than Kueue
        could admit, instead of a Workload for each worker of a sweep at once. Read after
        ``check_cluster``."""
        refusal, groups = self._gate
        if not plans or refusal:
            return None
        cores = min(plan.cores for plan in plans.values())
        memory_gb = min(plan.memory_gb for plan in plans.values())
        smallest = pod_requests(cores, memory_gb, self.clients.cluster.scratch_gb)
        fits = pods_at_once(groups, smallest)
        pods = sum(plan.workers + (0 if plan.coordinator_merges else 1) for plan in plans.values())
        if fits is None or fits >= pods:
            return None
        return max(1, fits)

    def _argo_refusal(self) -> str:
        """Why Argo's controller does not do, "" when it does."""
        return argo_refusal(self._argo_found())

    def _argo_found(self) -> str:
        """The version of Argo's controller: SIMRUN_ARGO_VERSION, else the image of its
        Deployment, else why that cannot be read."""
        if self.clients.cluster.argo_version:
            return self.clients.cluster.argo_version
        namespace, _, name = self.clients.cluster.argo_controller.partition("/")
        try:
            deployment: Any = self.clients.apps.read_namespaced_deployment(
                name, namespace, _preload_content=False
            )
        except ApiException as error:
            if error.status not in (403, 404):
                raise
            return f"its Deployment {self.clients.cluster.argo_controller}: {error}"
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
        response: Any = self.clients.apis.get_api_versions(_preload_content=False)
        found: dict[str, Any] = json.loads(response.data)
        return found

    def _queue_flavors(self, custom: CustomObjectsApi | None = None) -> list[list[Flavor]]:
        """What the ClusterQueue behind the runs' LocalQueue can give one pod, by resource
        group and flavor (``kueue_quota``)."""
        custom = custom or self.clients.custom
        local = cast(
            dict[str, Any],
            custom.get_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                self.clients.namespace,
                "localqueues",
                self.clients.cluster.queue,
            ),
        )
        self._cluster_queue = str(local["spec"]["clusterQueue"])
        cluster_queue = cast(
            dict[str, Any],
            custom.get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", self._cluster_queue
            ),
        )
        cohort = cohort_of(cluster_queue)
        given = self._from_cohort(custom, cluster_queue, cohort) if cohort else None
        return queue_flavors(cluster_queue, given)

    def _from_cohort(
        self, custom: CustomObjectsApi, cluster_queue: dict[str, Any], cohort: str
    ) -> dict[tuple[str, str], Decimal] | None:
        """The most the ClusterQueue's cohort could ever give it of each of its flavors'
        resources (``cohort_tree``), from the lists of the ClusterQueues and of the Cohorts;
        None when they may not be listed (403) or Kueue has no Cohort API (404): no cap known
        then."""
        try:
            queues, cohorts = (
                cast(
                    dict[str, Any],
                    custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural),
                ).get("items")
                or []
                for plural in ("clusterqueues", "cohorts")
            )
        except ApiException as error:
            if error.status not in UNREADABLE:
                raise
            log.info("the cohort of the runs' queue is unknown: %s %s", error.status, error.reason)
            return None
        tree = Tree(queues, cohorts)
        return {key: tree.from_cohort(cohort, key) for key in quotas(cluster_queue)}


def _least(*limits: Limit | None) -> Limit | None:
    """The least of the limits known (not None), None when none is."""
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def _offered(cores: float, memory_gb: float) -> dict[str, Decimal]:
    """A node's allocatable cores and GiB as the quantities pods request."""
    return {"cpu": Decimal(str(cores)), "memory": Decimal(str(memory_gb)) * GIB}


def _holds(offered: Mapping[str, Decimal], requests: Mapping[str, Decimal]) -> bool:
    """Whether what is offered holds the requests (the resources it names)."""
    return all(amount <= offered[name] for name, amount in requests.items() if name in offered)


def _retry(plan: TaskPlan) -> str:
    """What a refusal adds of a task's retry memory, when it asks more."""
    if plan.retry_memory_gb <= plan.memory_gb:
        return ""
    return f" ({plan.retry_memory_gb:g} GiB for its retry after a kill for memory)"


def _flavor_words(flavor: Flavor) -> str:
    """What one flavor gives one pod, in a refusal's words ("" for none of what a pod asks)."""
    words = []
    if "cpu" in flavor:
        cpu = flavor["cpu"]
        words.append(f"{'any' if cpu is None else f'{cpu:g}'} cores")
    if "memory" in flavor:
        memory = flavor["memory"]
        words.append(f"{'any' if memory is None else f'{float(memory / GIB):.1f}'} GiB")
    if "ephemeral-storage" in flavor:
        words.append(f"{_gib(flavor['ephemeral-storage'])} GiB of scratch")
    return ", ".join(words)


def _gib(amount: Decimal | None) -> str:
    """Bytes in GiB as a refusal says them; "any" for no limit known."""
    return "any" if amount is None else f"{float(amount / GIB):g}"
