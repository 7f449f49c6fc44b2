"""A Kubernetes API server on loopback for the paths the Argo backend uses, strict.

It keeps workflows, pods, their logs and nodes in memory and answers as the API server does
(list, get, create, merge and strategic merge patches with a resourceVersion precondition,
delete, pod logs with ``tailLines`` and ``limitBytes``, watches of workflows and of pods: every
write of a pod is an event, ``pod_events``), so the backend is tested with the real
``kubernetes`` client over HTTP. Every request is recorded; hooks let a
test play a conflicting writer or the cluster running a pod.

It refuses what a real cluster refuses (``admit``): every object created or patched is held
to the schema of its kind and the API server's rules (``kube_rules``, 422 Invalid with a
Status naming each field), a pod to the Pod Security level its namespace enforces
(``docker/k8s/00-namespace.yaml``; 403 Forbidden), and a Workflow to what its pods would be:
the pods Argo makes of each DAG task's template with its parameters, first attempt and retry
after a kill for memory (``argo_pods``), held to the same rules, and the parameters Argo
cannot resolve. A real API server would take such a Workflow and Argo would fail it or its
pods one by one; the stand-in refuses it at once, naming the fault.
It refuses what is too large as they do: a request body over the API server's 3 MiB with 413,
an object over etcd's 1.5 MiB request limit with 500 "etcdserver: request is too large", and
(the CRD's schema, from Argo 4.0) more than 200 templates or DAG tasks in a Workflow with 422;
its Argo controller fails a Workflow past 1 MiB, and makes no more pods of one at once than
its ``parallelism`` (``argo_creates_pods``).
"""

from __future__ import annotations

import base64
import calendar
import copy
import gzip
import itertools
import json
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml
from kubernetes.client import ApiClient, Configuration

from tests.backends import kube_policies, kube_rbac, kubelet, kueue
from tests.backends.argo_pod_security import violations
from tests.backends.argo_pods import ArgoInvalid, argo_pods, calls, template_pods
from tests.backends.argo_workflows import fnv1a_32
from tests.backends.kube_negotiation import negotiated
from tests.backends.kube_rules import Cause, refusals

KEPT_LISTS = 8
"""The lists with pages still to read that the server keeps (``KubeState.keep_list``)."""
WORKFLOWS = re.compile(r"^/apis/argoproj\.io/v1alpha1/namespaces/(?P<ns>[^/]+)/workflows$")
WORKFLOW = re.compile(
    r"^/apis/argoproj\.io/v1alpha1/namespaces/(?P<ns>[^/]+)/workflows/(?P<name>[^/]+)$"
)
PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")
POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
CONFIG_MAPS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps$")
CONFIG_MAP = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps/(?P<name>[^/]+)$")
POD_LOG = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")
KUEUE = r"^/apis/kueue\.x-k8s\.io/(?P<version>[^/]+)"
WORKLOADS = re.compile(KUEUE + r"/namespaces/(?P<ns>[^/]+)/workloads$")
LOCAL_QUEUE = re.compile(KUEUE + r"/namespaces/(?P<ns>[^/]+)/localqueues/(?P<name>[^/]+)$")
CLUSTER_QUEUE = re.compile(KUEUE + r"/clusterqueues/(?P<name>[^/]+)$")
KUEUE_CREATE = re.compile(
    KUEUE + r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>localqueues|clusterqueues|"
    r"resourceflavors|cohorts)$"
)
KUEUE_KINDS = {
    "localqueues": "LocalQueue",
    "clusterqueues": "ClusterQueue",
    "resourceflavors": "ResourceFlavor",
    "cohorts": "Cohort",
}
KUEUE_GROUP = re.compile(r"^/apis/kueue\.x-k8s\.io/?$")
DEPLOYMENT = re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments/(?P<name>[^/]+)$")
EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
NODES = re.compile(r"^/api/v1/nodes$")
NODE = re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$")

REQUEST_BYTES_MAX = 3 << 20
"""The API server's limit on a request body (``MaxRequestBodyBytes``): 413 past it."""
ETCD_BYTES_MAX = 1572864
"""etcd's ``--max-request-bytes`` default: the API server answers 500 past it."""
ARGO_WORKFLOW_BYTES_MAX = 1 << 20
"""Argo's controller's ``MAX_WORKFLOW_SIZE`` default: a Workflow whose JSON is larger even with
its nodes compressed is failed (``argo_too_large``)."""
STALL = -1
"""What ``KubeState.intercept`` returns to make the server read a request and never answer."""
STALL_MAX_S = 30.0
"""The longest a stalled request is held (the server's shutdown ends it sooner)."""
NOT_ACCEPTABLE = (
    "only the following media types are accepted: application/json, application/yaml, "
    "application/vnd.kubernetes.protobuf"
)
"""The API server's 406 when no range of ``Accept`` can be served (``kube_negotiation``)."""
REASONS = {
    409: "AlreadyExists",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

K8S = Path(__file__).resolve().parents[2] / "docker" / "k8s"
KINDS = {
    "workflows": ("argoproj.io/v1alpha1", "Workflow"),
    "pods": ("v1", "Pod"),
    "configmaps": ("v1", "ConfigMap"),
    "nodes": ("v1", "Node"),
}
"""The apiVersion and kind of the objects of each resource the stand-in serves."""

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


@dataclass
class Request:
    """One request the server answered."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    status: int = 0
    authorization: str = ""
    sent: int = 0
    """The bytes of the answer's body (a watch's are not counted)."""
    accept: str = ""


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also what a strategic merge patch does to maps and to
    atomic lists such as a node's taints)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def matches(labels: dict[str, str], selector: str | None) -> bool:
    """Whether labels match a selector of ``k=v``, ``k!=v``, ``k in (a,b)``, ``k`` and ``!k``
    (no label ``k``) terms."""
    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", selector or ""):
        term = term.strip()
        if found := re.fullmatch(r"(\S+) in \(([^)]*)\)", term):
            if labels.get(found[1]) not in {v.strip() for v in found[2].split(",")}:
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_matches(obj: dict[str, Any], selector: str | None) -> bool:
    """Whether an object matches a field selector of ``path=value`` and ``path!=value`` terms
    (``involvedObject.name=p``, ``status.phase!=Running``)."""
    for term in (selector or "").split(","):
        if not term:
            continue
        negated = "!=" in term
        path, _, wanted = term.partition("!=" if negated else "=")
        value: Any = obj
        for part in path.lstrip("=").split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if (str(value if value is not None else "") == wanted.lstrip("=")) == negated:
            return False
    return True


class ApiError(Exception):
    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details


def invalid(kind: str, name: str, causes: list[Cause]) -> ApiError:
    """The API server's 422: ``<Kind> "<name>" is invalid: <field>: <why>, …`` with the causes."""
    listed = ", ".join(str(c) for c in causes)
    details = {
        "name": name,
        "kind": kind.lower() + "s",
        "causes": [
            {"reason": "FieldValueInvalid", "message": c.message, "field": c.field} for c in causes
        ],
    }
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {listed}', details)


@cache
def manifests() -> tuple[dict[str, Any], ...]:
    """The objects of docker/k8s/, as an operator applies them."""
    return tuple(
        document
        for path in sorted(K8S.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document
    )


def manifest_namespaces() -> dict[str, str]:
    """The namespaces of docker/k8s/ with the Pod Security level each enforces."""
    return {
        d["metadata"]["name"]: (d["metadata"].get("labels") or {}).get(
            "pod-security.kubernetes.io/enforce", "privileged"
        )
        for d in manifests()
        if d["kind"] == "Namespace"
    }


def kueue_manifests(kind: str) -> list[dict[str, Any]]:
    """The Kueue objects of a kind in docker/k8s/, each held to Kueue's schema of its version
    (``kueue_schemas``) as the API server holds it when an operator applies them: an invalid
    one fails the stand-in at once, as ``kubectl apply`` would fail."""
    found = [copy.deepcopy(d) for d in manifests() if d["kind"] == kind]
    for document in found:
        if causes := refusals(document):
            raise invalid(kind, document["metadata"].get("name", ""), causes)
    return found


@cache
def manifest_policies() -> list[kube_policies.Policy]:
    """The ValidatingAdmissionPolicies docker/k8s/ binds to deny."""
    return kube_policies.policies(manifests())


ADMIN_TOKEN = "token-cluster-admin"
"""The token of an administrator (``kubectl`` as cluster-admin): tests making objects by hand."""


def token_of(account: str) -> str:
    """The token of a ServiceAccount of docker/k8s/ (``simrun-worker``), or the admin's."""
    return ADMIN_TOKEN if account == "cluster-admin" else f"token-{account}"


def manifest_tokens() -> dict[str, tuple[str, str]]:
    """A token for each ServiceAccount of docker/k8s/."""
    return {
        token_of(name): (namespace, name)
        for namespace, name in manifest_objects("ServiceAccount")
        if name != "default"
    }


@cache
def account_grants(namespace: str, account: str) -> frozenset[kube_rbac.Grant]:
    """What docker/k8s/ grants a ServiceAccount."""
    return frozenset(kube_rbac.grants(manifests(), account, namespace))


def authorize(state: KubeState, request: Request) -> None:
    """401 without a known token, 403 for a verb the ServiceAccount's Roles do not grant."""
    token = request.authorization.removeprefix("Bearer ").strip()
    if token == ADMIN_TOKEN:
        return
    if token not in state.tokens:
        raise ApiError(401, "Unauthorized", "Unauthorized")
    grant = kube_rbac.needed(request.method, request.path, request.query)
    namespace, account = state.tokens[token]
    if grant is not None and not kube_rbac.allowed(set(account_grants(namespace, account)), grant):
        raise ApiError(403, "Forbidden", kube_rbac.forbidden_message(account, namespace, grant))


def manifest_objects(kind: str) -> set[tuple[str, str]]:
    """(namespace, name) of the objects of a kind in docker/k8s/; every namespace has the
    ServiceAccount ``default``."""
    found = {
        (d["metadata"].get("namespace", ""), d["metadata"]["name"])
        for d in manifests()
        if d["kind"] == kind
    }
    if kind == "ServiceAccount":
        found |= {(namespace, "default") for namespace in manifest_namespaces()}
    return found


TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def service_account_token(pod: dict[str, Any]) -> None:
    """The ServiceAccount admission plugin: unless the pod opts out
    (``automountServiceAccountToken: false``), its token (a projected volume) is mounted at
    ``TOKEN_PATH`` in every container that has no mount there already."""
    spec = pod["spec"]
    if spec.get("automountServiceAccountToken") is False:
        return
    spec.setdefault("volumes", []).append(
        {
            "name": "kube-api-access",
            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
        }
    )
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        mounts = container.setdefault("volumeMounts", [])
        if not any(m.get("mountPath") == TOKEN_PATH for m in mounts):
            mounts.append({"name": "kube-api-access", "mountPath": TOKEN_PATH, "readOnly": True})


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Whether a toleration tolerates a taint, as the scheduler and the taint manager match
    them: its key (none with ``Exists``: every key), its value (``Equal``) and its effect."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


def stored(obj: dict[str, Any]) -> None:
    """Refuse an object etcd cannot store, as the API server answers it (500)."""
    if len(json.dumps(obj, separators=(",", ":")).encode()) > ETCD_BYTES_MAX:
        raise ApiError(500, "InternalError", "etcdserver: request is too large")


def admit(state: KubeState, obj: dict[str, Any], *, pods: bool = True) -> None:
    """Refuse what the API server and its admission refuse: 422 for an invalid object (a
    Workflow whose pods would be invalid too), 403 for a pod its namespace's Pod Security
    level forbids, 404 in a namespace that does not exist. ``pods``: whether a Workflow's
    pods are held to the rules too (when it is created, or its templates change)."""
    meta = obj.get("metadata") or {}
    kind, name, namespace = obj.get("kind", ""), meta.get("name", ""), meta.get("namespace")
    if namespace is not None and namespace not in state.namespaces:
        raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
    causes = refusals(obj, argo_major=state.argo_major)
    if kind == "Workflow" and not causes and pods:
        try:
            made = list(template_pods(obj))
        except ArgoInvalid as error:
            made, causes = [], [Cause("spec.templates", str(error))]
        for template, node, attempt, pod in made:
            at = f"spec.templates[{template}] (the pod of {node}, attempt {attempt})"
            causes += [Cause(f"{at}.{c.field}", c.message) for c in refusals(pod)]
            level = state.namespaces.get(namespace or "", "privileged")
            causes += [
                Cause(at, f'violates PodSecurity "{level}:latest": {v}')
                for v in violations(level, pod["spec"])
            ]
    if causes:
        raise invalid(kind, name, causes)
    if kind == "Pod":
        account = (obj.get("spec") or {}).get("serviceAccountName") or "default"
        if (namespace, account) not in state.service_accounts:
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{name}" is forbidden: error looking up service account '
                f'{namespace}/{account}: serviceaccount "{account}" not found',
            )
        level = state.namespaces.get(namespace or "", "privileged")
        if found := violations(level, obj.get("spec") or {}):
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": '
                + "; ".join(found),
            )


@dataclass
class KubeState:
    """What the server holds; tests read and change it directly (under ``lock``)."""

    workflows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    """The log of each pod's main (or only) container."""
    container_logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """The logs of its other containers (init containers, ``wait``), by container."""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    config_maps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    workloads: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Kueue's Workloads (one per pod), read-only for simrun."""
    namespaces: dict[str, str] = field(default_factory=lambda: dict(manifest_namespaces()))
    """The namespaces that exist, with the Pod Security level each enforces."""
    secrets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Secrets by namespace and name (none unless a test makes them, as an operator would)."""
    claims: set[tuple[str, str]] = field(
        default_factory=lambda: manifest_objects("PersistentVolumeClaim")
    )
    service_accounts: set[tuple[str, str]] = field(
        default_factory=lambda: manifest_objects("ServiceAccount")
    )
    kueue_versions: list[str] = field(default_factory=lambda: ["v1beta2", "v1beta1"])
    """The versions of ``kueue.x-k8s.io`` Kueue serves (v1beta2 from Kueue 0.15 on)."""
    argo_version: str = "v4.1.2"
    """The version of Argo's controller: the tag of the image of its Deployment; its major
    version's CRD holds the Workflows (``argo_schemas.crd_validator``)."""
    argo_instance_id: str = ""
    """The ``instanceID`` of Argo's controller (its ConfigMap): it runs only the Workflows
    labelled ``INSTANCE_LABEL`` with it, or, without one, only those without the label."""
    cluster_queues: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {d["metadata"]["name"]: d for d in kueue_manifests("ClusterQueue")}
    )
    local_queues: dict[tuple[str, str], dict[str, Any]] = field(
        default_factory=lambda: {
            (d["metadata"]["namespace"], d["metadata"]["name"]): d
            for d in kueue_manifests("LocalQueue")
        }
    )
    cohorts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Kueue's Cohorts by name (none unless a test makes them, as an administrator would)."""
    resource_flavors: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            d["metadata"]["name"]: d for d in kueue_manifests("ResourceFlavor")
        }
    )
    tokens: dict[str, tuple[str, str]] = field(default_factory=lambda: dict(manifest_tokens()))
    """Bearer tokens by the ServiceAccount (namespace, name) they are of; ``ADMIN_TOKEN`` is
    the cluster's administrator, allowed everything."""
    unpullable: set[str] = field(default_factory=set)
    """Images no registry serves: a pod of one waits in ImagePullBackOff."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The events the kubelet and the scheduler wrote (``kubelet``)."""
    requests: list[Request] = field(default_factory=list)
    event_ttl_s: float = 3600.0
    """How long an event lives (the API server's ``--event-ttl``, 1 h by default)."""
    retry_after_s: int = 1
    """The ``Retry-After`` of a 429 a test plays."""
    evicted: list[dict[str, Any]] = field(default_factory=list)
    """The pods the taint manager evicted (``taint_manager``), in order."""
    before_node_patch: Callable[[str], None] | None = None
    """Called before a PATCH of a node is applied, e.g. to play a conflicting writer."""
    on_pod_created: Callable[[dict[str, Any]], None] | None = None
    intercept: Callable[[Request], int | None] | None = None
    """Called with each request before it is served: a status code to answer it with an error
    instead, ``STALL`` to never answer it, None to serve it."""
    lock: threading.RLock = field(default_factory=threading.RLock)
    _versions: itertools.count = field(default_factory=lambda: itertools.count(100))
    _watchers: list[tuple[str, str, queue.Queue]] = field(default_factory=list)
    """The open watches: the resource each watches, its label selector, its events."""
    _history: list[dict[str, Any]] = field(default_factory=list)
    """Every workflow event, so a watch from a resourceVersion gets what it missed."""
    _pod_history: list[dict[str, Any]] = field(default_factory=list)
    """Every pod event, likewise (``pod_events``)."""
    _pods_told: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Each pod as the last pod event told it (``pod_events``)."""
    _workload_history: list[dict[str, Any]] = field(default_factory=list)
    """Every Workload event, likewise (``pod_events``)."""
    _workloads_told: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Each Workload as the last Workload event told it (``pod_events``)."""

    lists: dict[tuple[str | None, ...], list[dict[str, Any]]] = field(default_factory=dict)
    """The items of the lists whose pages are still to be read, by their kind, namespace,
    selectors and version: each page of a list is cut from the list at its version, as etcd
    reads it (``keep_list``)."""
    compacted: int = 0
    """The resourceVersion etcd compacted up to: a watch or a continue token from before it
    is too old (410)."""
    bookmark_s: float = 1.0
    """How long a watch that asked for bookmarks stays silent before it gets one."""
    latest: int = 0
    bookmarks_sent: list[int] = field(default_factory=list)
    """The versions of the BOOKMARKs sent, in order."""

    @property
    def argo_major(self) -> int:
        """The major version of Argo (3 for ``v3.7.18``); 4, the vendored CRD's, for a tag
        without a version (``latest``)."""
        major = self.argo_version.removeprefix("v").split(".")[0]
        return int(major) if major.isdigit() else 4

    def version(self) -> str:
        self.latest = next(self._versions)
        return str(self.latest)

    def keep_list(self, key: tuple[str | None, ...], items: list[dict[str, Any]]) -> None:
        """Keep a list whose next page a ``continue`` token asks for; the last few only."""
        with self.lock:
            self.lists[key] = items
            while len(self.lists) > KEPT_LISTS:
                del self.lists[next(iter(self.lists))]

    def end_watches(self) -> None:
        """End every open watch, as an API server that restarts does: its clients watch again
        from the last version they saw."""
        with self.lock:
            for _, _, events in self._watchers:
                events.put(None)

    def compact(self) -> None:
        """Compact the history, as etcd does every few minutes: older versions are gone."""
        with self.lock:
            self.compacted = int(self.version())
            self._history, self._pod_history, self._workload_history = (
                [e for e in h if int(e["object"]["metadata"]["resourceVersion"]) > self.compacted]
                for h in (self._history, self._pod_history, self._workload_history)
            )

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Give an object a new resourceVersion (and a uid and creation time once)."""
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = self.version()
        meta.setdefault("uid", f"uid-{meta['resourceVersion']}")
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        return obj

    def put_workflow(self, workflow: dict[str, Any], event: str = "MODIFIED") -> None:
        """Store a workflow (as the Argo controller would write it) and tell the watchers."""
        with self.lock:
            meta = workflow["metadata"]
            self.workflows[(meta["namespace"], meta["name"])] = self.stamp(workflow)
            self._notify(event, workflow)

    def delete_workflow(self, namespace: str, name: str) -> None:
        """Delete a workflow, as its TTL does, with its pods."""
        with self.lock:
            workflow = self.workflows.pop((namespace, name))
            for key in [k for k, p in self.pods.items() if _owned_by(p, name)]:
                self.pods.pop(key)
            self._notify("DELETED", self.stamp(workflow))

    def put_pod(self, pod: dict[str, Any], log: str | None = None) -> None:
        with self.lock:
            meta = pod["metadata"]
            key = (meta.get("namespace", "simrun"), meta["name"])
            self.pods[key] = self.stamp(pod)
            if log is not None:
                self.logs[key] = log

    def username(self, authorization: str) -> str:
        """Who a request's token is, as the API server names it in ``request.userInfo``."""
        token = authorization.removeprefix("Bearer ").strip()
        if token not in self.tokens:
            return "kubernetes-admin"
        namespace, account = self.tokens[token]
        return f"system:serviceaccount:{namespace}:{account}"

    def expired(self, event: dict[str, Any]) -> bool:
        """Whether an event outlived ``event_ttl_s`` since it was last seen: the API server
        deletes it then."""
        seen = calendar.timegm(time.strptime(event["lastTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        return time.time() - seen > self.event_ttl_s

    def record_event(
        self, pod: dict[str, Any], reason: str, message: str, kind: str = "Warning"
    ) -> None:
        """An event about a pod, as the kubelet or the scheduler writes it."""
        meta = pod["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{len(self.events):016x}",
                "namespace": meta.get("namespace", "default"),
            },
            "involvedObject": {
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta.get("namespace", "default"),
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {
                "component": "default-scheduler" if reason == "FailedScheduling" else "kubelet"
            },
        }
        self.events.append(self.stamp(event))

    def pod_created(self, pod: dict[str, Any]) -> None:
        """After a pod is stored: the ServiceAccount admission's token, Kueue's webhook and
        admission (the kubelet starts a pod Kueue admits), or the kubelet for a pod Kueue does
        not manage."""
        service_account_token(pod)
        namespace = pod["metadata"]["namespace"]
        managed = kueue.webhook(pod, namespace in self.kueue_namespaces)
        if managed:
            made = kueue.workload(pod, self.kueue_versions[0])
            if causes := refusals(made):  # the stand-in's own Kueue, held to Kueue's schema
                raise AssertionError(f"the stand-in made an invalid Workload: {causes}")
            self.workloads[(namespace, made["metadata"]["name"])] = self.stamp(made)
        if pod["spec"].get("schedulingGates"):
            # The API server's own condition of a gated pod (from 1.27), as of its creation.
            pod["status"] = {"phase": "Pending", "conditions": [kubelet.gated()]}
        self.admit_workloads()  # which starts a pod Kueue admits: once
        if not managed:
            kubelet.start(self, pod)

    def admit_workloads(self) -> None:
        """Kueue admits what its quota holds (``kueue.admit``)."""
        pods = {p["metadata"].get("uid", ""): p for p in self.pods.values()}
        local = {key: q["spec"]["clusterQueue"] for key, q in self.local_queues.items()}
        admitted: list[dict[str, Any]] = []
        kueue.admit(
            list(self.workloads.values()),
            pods,
            local,
            kueue.Quotas(self.cluster_queues, self.cohorts),
            admitted.append,
        )
        for pod in admitted:
            if not pod["spec"].get("schedulingGates"):
                kubelet.start(self, pod)

    @property
    def kueue_namespaces(self) -> set[str]:
        """The namespaces Kueue manages (docs/cluster.md: ``managed-by-kueue: "true"``)."""
        return {
            d["metadata"]["name"]
            for d in manifests()
            if d["kind"] == "Namespace"
            and (d["metadata"].get("labels") or {}).get("managed-by-kueue") == "true"
        }

    def argo_runs(self, workflow: dict[str, Any]) -> bool:
        """Whether Argo's controller runs a Workflow: it lists and watches only those of its
        ``instanceID`` (``INSTANCE_LABEL``), or without one only those without the label; the
        others it never sees, so they stay as they were created, without a status."""
        labels = workflow["metadata"].get("labels") or {}
        if self.argo_instance_id:
            return labels.get(INSTANCE_LABEL) == self.argo_instance_id
        return INSTANCE_LABEL not in labels

    def argo_creates_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Create the pods of a stored Workflow that Argo's controller would make now
        (``argo_pods``: the first attempt of each DAG task and fan-out item not made yet), at
        most ``spec.parallelism`` of its pods not ended at once, as Argo does; each through
        admission, then the kubelet (``kubelet.start``). None of a Workflow it does not run
        (``argo_runs``), and none of one past its size, which it fails (``argo_too_large``).
        Its pods carry its ``instanceID``, as Argo labels them."""
        with self.lock:
            made: list[dict[str, Any]] = []
            workflow = self.workflows[(namespace, name)]
            if not self.argo_runs(workflow):
                return made
            if message := argo_too_large(workflow):
                workflow["status"] = {**(workflow.get("status") or {}), "phase": "Error"}
                workflow["status"]["message"] = message
                self.put_workflow(workflow)
                return made
            mine = [p for p in self.pods.values() if _owned_by(p, name)]
            active = sum((p.get("status") or {}).get("phase") not in kueue.TERMINAL for p in mine)
            most = (workflow.get("spec") or {}).get("parallelism") or None
            known = {p["metadata"]["name"] for p in mine}
            for _, attempt, pod in argo_pods(workflow, every_item=True):
                if attempt != 0 or pod["metadata"]["name"] in known:
                    continue
                if most is not None and active >= most:
                    break
                if self.argo_instance_id:
                    pod["metadata"]["labels"][INSTANCE_LABEL] = self.argo_instance_id
                admit(self, pod)
                pod["status"] = {"phase": "Pending"}
                self.pods[(namespace, pod["metadata"]["name"])] = self.stamp(pod)
                self.pod_created(pod)
                made.append(pod)
                active += 1
            return made

    def put_node(self, node: dict[str, Any]) -> None:
        with self.lock:
            self.nodes[node["metadata"]["name"]] = self.stamp(node)
            self.taint_manager(node)

    def taint_manager(self, node: dict[str, Any]) -> None:
        """Evict, as Kubernetes' taint manager does, every pod on a node that does not
        tolerate one of its ``NoExecute`` taints: deleted, its DisruptionTarget condition
        ``DeletionByTaintManager`` set first (tolerationSeconds is not played)."""
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") == "NoExecute"
        ]
        for key, pod in list(self.pods.items()):
            if (pod.get("spec") or {}).get("nodeName") != node["metadata"]["name"]:
                continue
            tolerations = (pod.get("spec") or {}).get("tolerations") or []
            if all(any(tolerates(t, taint) for t in tolerations) for taint in taints):
                continue
            status = pod.setdefault("status", {})
            status.setdefault("conditions", []).append(
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
            )
            self.evicted.append(self.pods.pop(key))

    def _notify(self, event: str, workflow: dict[str, Any]) -> None:
        self._history.append({"type": event, "object": copy.deepcopy(workflow)})
        self._tell("workflows", event, workflow)

    def _tell(self, resource: str, event: str, obj: dict[str, Any]) -> None:
        for watched, selector, events in self._watchers:
            if watched == resource and matches(obj["metadata"].get("labels") or {}, selector):
                events.put({"type": event, "object": copy.deepcopy(obj)})

    def pod_events(self) -> None:
        """Tell the watches of pods, and of Kueue's Workloads, of every one written since the
        last call, as the API server tells every write: created (``ADDED``), changed
        (``MODIFIED``: by a request, or in place by the stand-in's kubelet, Kueue or a test,
        which gets a new resourceVersion then, as a write does) or deleted (``DELETED``).
        Called before every request is served and at every tick of a watch of pods or
        Workloads, so what a request reads was told first."""
        with self.lock:
            self._changes("pods", self.pods, self._pods_told, self._pod_history)
            self._changes("workloads", self.workloads, self._workloads_told, self._workload_history)

    def _changes(
        self,
        resource: str,
        objects: dict[tuple[str, str], dict[str, Any]],
        told: dict[tuple[str, str], dict[str, Any]],
        history: list[dict[str, Any]],
    ) -> None:
        """Tell the watches of ``resource`` what changed in ``objects`` since ``told``."""
        for key, obj in objects.items():
            before = told.get(key)
            if before == obj:
                continue
            meta = obj.setdefault("metadata", {})
            if before is not None and (
                before["metadata"].get("resourceVersion") == meta.get("resourceVersion")
            ):
                self.stamp(obj)  # written in place
            elif "resourceVersion" not in meta:
                self.stamp(obj)
            self._event(resource, history, "ADDED" if before is None else "MODIFIED", obj)
            told[key] = copy.deepcopy(obj)
        for key in [k for k in told if k not in objects]:
            self._event(resource, history, "DELETED", self.stamp(told.pop(key)))

    @property
    def pods_version(self) -> int:
        """The resourceVersion of the last pod event told (0 before any)."""
        with self.lock:
            self.pod_events()
            last = self._pod_history[-1] if self._pod_history else None
            return int(last["object"]["metadata"]["resourceVersion"]) if last else 0

    def _event(
        self, resource: str, history: list[dict[str, Any]], event: str, obj: dict[str, Any]
    ) -> None:
        history.append({"type": event, "object": copy.deepcopy(obj)})
        self._tell(resource, event, obj)


def argo_too_large(workflow: dict[str, Any]) -> str:
    """Argo's controller's message failing a Workflow whose JSON, with the nodes it will have
    by its end compressed (``argo_status``), is past ``ARGO_WORKFLOW_BYTES_MAX`` without a
    database to offload them to ("" when it is not): the controller's ``packer`` and
    ``hydrator``, which mark the Workflow ``Error`` (the stand-in, at once)."""
    ended = {**workflow, "status": argo_status(workflow)}
    size = len(json.dumps(ended, separators=(",", ":")).encode())
    if size <= ARGO_WORKFLOW_BYTES_MAX:
        return ""
    return (
        f"workflow is longer than maximum allowed size. compressed size {size} > maxSize "
        f"{ARGO_WORKFLOW_BYTES_MAX}Tried to offload but encountered error: offload node status "
        "is not supported"
    )


def argo_status(workflow: dict[str, Any]) -> dict[str, Any]:
    """The status Argo writes of a Workflow by its end, one attempt a DAG task and fan-out
    item (``calls``): a Retry and a Pod node each with its inputs, a node of each nested DAG
    and fan-out, compressed (gzip, base64) as Argo does past its size, and a
    ``taskResultsCompletionStatus`` entry a Pod node."""
    name = workflow["metadata"]["name"]
    at = "2026-11-29T10:00:00Z"

    def node(path: str, kind: str, template: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        full = f"{name}.{path}" if path else name
        found = {
            "id": f"{name}-{fnv1a_32(full)}",
            "name": full,
            "displayName": full.rsplit(".", 1)[-1],
            "type": kind,
            "templateName": template,
            "templateScope": f"local/{name}",
            "phase": "Succeeded",
            "boundaryID": name,
            "startedAt": at,
            "finishedAt": at,
            "progress": "1/1",
            "resourcesDuration": {"cpu": 600, "memory": 9000},
            **fields,
        }
        return found["id"], found

    nodes = dict([node("", "DAG", workflow["spec"].get("entrypoint", ""))])
    for path, template, inputs in calls(workflow, every_item=True):
        parts = path.split(".")[:-1]  # the nested DAGs it is in
        for depth in range(1, len(parts) + 1):
            nodes.update([node(".".join(parts[:depth]), "DAG", parts[depth - 1])])
        if "(" in path:
            nodes.update([node(path.split("(")[0], "TaskGroup", template["name"])])
        values = {"parameters": [{"name": k, "value": v} for k, v in inputs.items()]}
        pod_id, pod = node(
            f"{path}(0)",
            "Pod",
            template["name"],
            inputs=values,
            hostNodeName="node-a",
            outputs={"exitCode": "0"},
            nodeFlag={"retried": True},
        )
        nodes.update([node(path, "Retry", template["name"], inputs=values, children=[pod_id])])
        nodes[pod_id] = pod
    compressed = gzip.compress(json.dumps(nodes, separators=(",", ":")).encode())
    return {
        "phase": "Succeeded",
        "startedAt": at,
        "finishedAt": at,
        "progress": f"{len(nodes)}/{len(nodes)}",
        "compressedNodes": base64.b64encode(compressed).decode(),
        "taskResultsCompletionStatus": {i: True for i, n in nodes.items() if n["type"] == "Pod"},
    }


def _owned_by(pod: dict[str, Any], workflow: str) -> bool:
    return (pod["metadata"].get("labels") or {}).get("workflows.argoproj.io/workflow") == workflow


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers then body: no 40 ms wait for a delayed ACK
    server: KubeApiServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: the requests are recorded in the state."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if length > REQUEST_BYTES_MAX:
            with self.server.state.lock:
                self.server.state.requests.append(Request(method, url.path, query, "", None, 413))
            message = f"Request entity too large: limit is {REQUEST_BYTES_MAX}"
            self._send(413, _status(413, "RequestEntityTooLarge", message))
            return
        content_type = (self.headers.get("Content-Type") or "").split(";")[0]
        body = json.loads(raw) if raw else None
        authorization = self.headers.get("Authorization") or ""
        accept = self.headers.get("Accept") or ""
        request = Request(
            method, url.path, query, content_type, body, authorization=authorization, accept=accept
        )
        state = self.server.state
        with state.lock:
            state.pod_events()
            state.requests.append(request)
            answer = state.intercept(request) if state.intercept else None
        if answer == STALL:
            self.server.closing.wait(STALL_MAX_S)
            self.close_connection = True
            return
        if answer is not None:
            request.status = answer
            reason = REASONS.get(answer, "InternalError")
            # The API server's priority and fairness asks a client it throttles to come back.
            after = {"Retry-After": str(state.retry_after_s)} if answer == 429 else {}
            self._send(answer, _status(answer, reason, f"{reason} played by the test"), after)
            return
        media = None  # JSON, unless the answer is negotiated otherwise
        try:
            authorize(state, request)
            watched = WORKFLOWS.match(url.path) or PODS.match(url.path)
            watched = watched or WORKLOADS.match(url.path)
            if method == "GET" and watched and query.get("watch") == "true":
                request.status = 200
                self._watch(watched["ns"], query, url.path.rsplit("/", 1)[-1])
                return
            code, body = self._route(method, url.path, query, content_type, request.body)
            if method == "GET" and isinstance(body, dict):
                answer = negotiated(accept, body)
                if answer is None:
                    raise ApiError(406, "NotAcceptable", NOT_ACCEPTABLE)
                media, body = answer
        except ApiError as error:
            code, body = error.code, _status(error.code, error.reason, error.message)
            if error.details:
                body["details"] = error.details
        request.status = code
        self._send(code, body, request=request, media=media)

    def _send(
        self,
        code: int,
        body: Any,
        headers: dict[str, str] | None = None,
        *,
        request: Request | None = None,
        media: str | None = None,
    ) -> None:
        """Answer with ``body`` (and ``headers``) as ``media`` (JSON by default); the bytes of
        the body recorded in ``request`` first, so a client that has the answer reads them
        counted."""
        if isinstance(body, str):
            data, kind = body.encode(), "text/plain"
        else:
            data, kind = json.dumps(body).encode(), media or "application/json"
        if request is not None:
            request.sent = len(data)
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _route(
        self, method: str, path: str, query: dict[str, str], content_type: str, body: Any
    ) -> tuple[int, Any]:
        state = self.server.state
        selector = query.get("labelSelector")
        with state.lock:
            if m := WORKFLOWS.match(path):
                if method == "POST":
                    return 201, self._create(state.workflows, m["ns"], body, "workflows")
                return 200, self._list(state.workflows, m["ns"], query, "WorkflowList")
            if m := WORKFLOW.match(path):
                key = (m["ns"], m["name"])
                return self._item(state.workflows, key, method, content_type, body, "workflows")
            if m := POD_LOG.match(path):
                return 200, self._log(m["ns"], m["name"], query)
            if m := PODS.match(path):
                if method == "POST":
                    pod = self._create(state.pods, m["ns"], body, "pods")
                    pod.setdefault("status", {"phase": "Pending"})
                    state.pod_created(pod)
                    if state.on_pod_created:
                        state.on_pod_created(pod)
                    return 201, pod
                return 200, self._list(state.pods, m["ns"], query, "PodList")
            if m := POD.match(path):
                key = (m["ns"], m["name"])
                return self._item(state.pods, key, method, content_type, body, "pods")
            if m := CONFIG_MAPS.match(path):
                if method == "POST":
                    return 201, self._create(state.config_maps, m["ns"], body, "configmaps")
                return 200, self._list(state.config_maps, m["ns"], query, "ConfigMapList")
            if m := CONFIG_MAP.match(path):
                key = (m["ns"], m["name"])
                return self._item(state.config_maps, key, method, content_type, body, "configmaps")
            if m := EVENTS.match(path):
                fields = query.get("fieldSelector")
                namespace = m["ns"]

                def events() -> list[dict[str, Any]]:
                    return [
                        e
                        for e in state.events
                        if e["metadata"]["namespace"] == namespace
                        and field_matches(e, fields)
                        and not state.expired(e)
                    ]

                return 200, _page(state, "EventList", (namespace, fields), events, query)
            if path.rstrip("/") == "/apis":
                return 200, _api_groups(state.kueue_versions)
            if KUEUE_GROUP.match(path) and state.kueue_versions:
                return 200, _kueue_group(state.kueue_versions)
            if (m := re.match(KUEUE, path)) and m["version"] not in state.kueue_versions:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if m := WORKLOADS.match(path):
                listing = self._list(state.workloads, m["ns"], query, "WorkloadList")
                listing["apiVersion"] = f"kueue.x-k8s.io/{m['version']}"
                return 200, listing
            if (m := KUEUE_CREATE.match(path)) and method == "POST":
                return 201, self._create_kueue(m, body)
            if (m := KUEUE_CREATE.match(path)) and not m["ns"] and method == "GET":
                store = {"clusterqueues": state.cluster_queues, "cohorts": state.cohorts}
                kind = KUEUE_KINDS[m["resource"]]
                every = store[m["resource"]]
                listed = _page(state, f"{kind}List", (), lambda: list(every.values()), query)
                listed["apiVersion"] = f"kueue.x-k8s.io/{m['version']}"
                return 200, listed
            if m := LOCAL_QUEUE.match(path):
                return 200, _found(state.local_queues.get((m["ns"], m["name"])), "localqueues", m)
            if m := CLUSTER_QUEUE.match(path):
                return 200, _found(state.cluster_queues.get(m["name"]), "clusterqueues", m)
            if (m := DEPLOYMENT.match(path)) and (m["ns"], m["name"]) == ARGO_CONTROLLER:
                return 200, _controller(state.argo_version)
            if NODES.match(path):
                nodes = state.nodes.values()
                return 200, _page(
                    state,
                    "NodeList",
                    (selector,),
                    lambda: [n for n in nodes if _labelled(n, selector)],
                    query,
                )
            if m := NODE.match(path):
                if method == "PATCH" and state.before_node_patch:
                    state.before_node_patch(m["name"])
                return self._item(state.nodes, m["name"], method, content_type, body, "nodes")
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")

    def _create_kueue(self, m: re.Match[str], body: Any) -> dict[str, Any]:
        """Create a LocalQueue, a ClusterQueue, a ResourceFlavor or a Cohort, held to Kueue's
        schema and its webhook's rules (``kueue.webhook_causes``) at
        the version of the request (``kueue_schemas``): 422 for what Kueue's CRD refuses."""
        state = self.server.state
        body = _of_kind(body, f"kueue.x-k8s.io/{m['version']}", KUEUE_KINDS[m["resource"]])
        name = body["metadata"].get("name", "")
        if m["ns"]:
            body["metadata"]["namespace"] = m["ns"]
        admit(state, body)
        if causes := kueue.webhook_causes(body):
            raise invalid(body["kind"], name, causes)
        store: dict[Any, dict[str, Any]] = {
            "localqueues": state.local_queues,
            "clusterqueues": state.cluster_queues,
            "resourceflavors": state.resource_flavors,
            "cohorts": state.cohorts,
        }[m["resource"]]
        key: Any = (m["ns"], name) if m["ns"] else name
        if key in store:
            raise ApiError(409, "AlreadyExists", f'{m["resource"]}.kueue.x-k8s.io "{name}" exists')
        store[key] = state.stamp(body)
        state.admit_workloads()
        return body

    def _create(
        self, store: dict[Any, dict[str, Any]], namespace: str, body: Any, kind: str
    ) -> dict[str, Any]:
        state = self.server.state
        body = _of_kind(body, *KINDS[kind])
        name = body["metadata"].get("name", "")
        body["metadata"]["namespace"] = namespace
        stored(body)  # etcd's refusal comes after admission; checked first, as it is cheap
        admit(state, body)
        if (namespace, name) in store:
            raise ApiError(409, "AlreadyExists", f'{kind} "{name}" already exists')
        store[(namespace, name)] = state.stamp(body)
        if kind == "workflows":
            state._notify("ADDED", body)
        return body

    def _list(
        self,
        store: dict[Any, dict[str, Any]],
        namespace: str,
        query: dict[str, str],
        kind: str,
    ) -> dict[str, Any]:
        labels, fields = query.get("labelSelector"), query.get("fieldSelector")

        def listing() -> list[dict[str, Any]]:
            return [
                obj
                for (ns, _), obj in sorted(store.items())
                if ns == namespace and _labelled(obj, labels) and field_matches(obj, fields)
            ]

        return _page(self.server.state, kind, (namespace, labels, fields), listing, query)

    def _item(
        self,
        store: dict[Any, dict[str, Any]],
        key: Any,
        method: str,
        content_type: str,
        body: Any,
        resource: str,
    ) -> tuple[int, Any]:
        state = self.server.state
        if key not in store:
            name = key[1] if isinstance(key, tuple) else key
            raise ApiError(404, "NotFound", f'"{name}" not found')
        current = store[key]
        if method == "GET":
            return 200, current
        if method == "DELETE":
            wanted = ((body or {}).get("preconditions") or {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource} "{current["metadata"]["name"]}": '
                    "the ResourceVersion in the precondition does not match",
                )
            store.pop(key)
            if resource == "pods":
                state.admit_workloads()
            if store is state.workflows:
                state._notify("DELETED", state.stamp(current))
            return 200, current
        if method != "PATCH":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
        allowed = {MERGE_PATCH} if store is state.workflows else {MERGE_PATCH, STRATEGIC_PATCH}
        if content_type not in allowed or not isinstance(body, dict):
            raise ApiError(415, "UnsupportedMediaType", f"{content_type} is not supported")
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; "
                "please apply your changes to the latest version and try again",
            )
        patched = merge(current, body)
        api_version, kind = KINDS[resource]
        patched.setdefault("apiVersion", api_version)
        patched.setdefault("kind", kind)
        templates = (current.get("spec") or {}).get("templates")
        admit(state, patched, pods=templates != (patched.get("spec") or {}).get("templates"))
        group, _, version = api_version.rpartition("/")
        username = state.username(self.headers.get("Authorization") or "")
        if denied := kube_policies.denials(
            manifest_policies(),
            resource=(group, version, resource),
            operation="UPDATE",
            obj=patched,
            old=current,
            username=username,
        ):
            raise ApiError(422, "Invalid", "; ".join(denied))
        stored(patched)
        store[key] = state.stamp(patched)
        if store is state.nodes:
            state.taint_manager(patched)
        if store is state.workflows:
            state._notify("MODIFIED", patched)
        return 200, patched

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> str:
        state = self.server.state
        pod = state.pods.get((namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        containers = [c["name"] for c in pod["spec"]["containers"]]
        init = [c["name"] for c in pod["spec"].get("initContainers") or []]
        container = query.get("container")
        if container is None and len(containers) > 1:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, "
                f"choose one of: [{' '.join(containers)}] or one of the init containers: "
                f"[{' '.join(init)}]",
            )
        container = container or containers[0]
        if container not in containers + init:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        status = pod.get("status") or {}
        statuses = [*(status.get("initContainerStatuses") or [])]
        statuses += status.get("containerStatuses") or []
        own = next((c for c in statuses if c.get("name") == container), None)
        waiting = own is not None and set(own.get("state") or {}) == {"waiting"}
        if waiting or (own is None and status.get("phase", "Pending") == "Pending"):
            reason = ((own or {}).get("state") or {}).get("waiting", {}).get("reason")
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start'
                + (f": {reason}" if reason else ""),
            )
        if container == "main" or container not in ("wait", *init):
            text = state.logs.get((namespace, name), "")
        else:
            text = state.container_logs.get((namespace, name, container), "")
        if "tailLines" in query:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else ""
        if "limitBytes" in query:  # the first bytes of what the query selected
            text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
        return text

    def _watch(self, namespace: str, query: dict[str, str], resource: str) -> None:
        """A watch of workflows, pods or Workloads: what it missed since its
        ``resourceVersion`` (all there is without one), then every change until its
        ``timeoutSeconds``."""
        state = self.server.state
        selector = query.get("labelSelector")
        events: queue.Queue = queue.Queue()
        told = resource != "workflows"  # written in place, told by ``pod_events``
        objects, history = {
            "workflows": (state.workflows, state._history),
            "pods": (state.pods, state._pod_history),
            "workloads": (state.workloads, state._workload_history),
        }[resource]
        with state.lock:
            if "resourceVersion" not in query:
                missed = [
                    {"type": "ADDED", "object": copy.deepcopy(obj)}
                    for (_, _), obj in sorted(objects.items())
                ]
            else:
                since = int(query["resourceVersion"])
                if since and since < state.compacted:
                    self._too_old(since, state.compacted)
                    return
                missed = [
                    e for e in history if int(e["object"]["metadata"]["resourceVersion"]) > since
                ]
            for event in missed:
                meta = event["object"]["metadata"]
                if meta["namespace"] == namespace and _labelled(event["object"], selector):
                    events.put(event)
            watcher = (resource, selector or "", events)
            state._watchers.append(watcher)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + float(query.get("timeoutSeconds", 60))
        bookmarks = query.get("allowWatchBookmarks") == "true"
        quiet_since = time.monotonic()
        try:
            while time.monotonic() < deadline and not self.server.closing.is_set():
                if told:
                    state.pod_events()
                try:
                    event = events.get(timeout=0.1)
                except queue.Empty:
                    if not bookmarks or time.monotonic() - quiet_since < state.bookmark_s:
                        continue
                    event = _bookmark(str(state.latest), resource)
                    state.bookmarks_sent.append(state.latest)
                if event is None:  # ``end_watches``
                    break
                quiet_since = time.monotonic()
                self._chunk(event)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with state.lock:
                state._watchers.remove(watcher)
            self.close_connection = True

    def _chunk(self, event: dict[str, Any]) -> None:
        line = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        self.wfile.flush()

    def _too_old(self, since: int, compacted: int) -> None:
        """A watch from a compacted version: the API server's in-stream 410, then the end."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        message = f"too old resource version: {since} ({compacted})"
        self._chunk({"type": "ERROR", "object": _status(410, "Expired", message)})
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


def _bookmark(version: str, resource: str) -> dict[str, Any]:
    """A BOOKMARK of a watch of ``resource``: only the version the watch has reached."""
    api_version, kind = {**KINDS, "workloads": ("kueue.x-k8s.io/v1beta2", "Workload")}[resource]
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": kind,
            "apiVersion": api_version,
            "metadata": {"resourceVersion": version},
        },
    }


INSTANCE_LABEL = "workflows.argoproj.io/controller-instanceid"
"""The label of a Workflow (and of its pods) naming the controller instance that runs it."""
ARGO_CONTROLLER = ("argo", "workflow-controller")
"""Where Argo's install manifests put its controller's Deployment."""


def _kueue_group(versions: list[str]) -> dict[str, Any]:
    """Discovery of ``kueue.x-k8s.io``: the versions Kueue serves, the first preferred."""
    listed = [{"groupVersion": f"kueue.x-k8s.io/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "kueue.x-k8s.io",
        "versions": listed,
        "preferredVersion": listed[0],
    }


def _api_groups(kueue_versions: list[str]) -> dict[str, Any]:
    """Discovery of every group (``GET /apis``): Argo's, apps, and Kueue's when served."""
    groups = [
        {"name": name, "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in vs]}
        for name, vs in (("apps", ["v1"]), ("argoproj.io", ["v1alpha1"]))
    ]
    if kueue_versions:
        groups.append(_kueue_group(kueue_versions))
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _found(obj: dict[str, Any] | None, resource: str, m: re.Match[str]) -> dict[str, Any]:
    """A Kueue object as the version asked for, 404 when there is none."""
    if obj is None:
        message = f'{resource}.kueue.x-k8s.io "{m["name"]}" not found'
        raise ApiError(404, "NotFound", message)
    return {**obj, "apiVersion": f"kueue.x-k8s.io/{m['version']}"}


def _controller(version: str) -> dict[str, Any]:
    """Argo's controller Deployment, its image tagged with its version."""
    image = f"quay.io/argoproj/workflow-controller:{version}"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "workflow-controller", "namespace": "argo"},
        "spec": {
            "selector": {"matchLabels": {"app": "workflow-controller"}},
            "template": {
                "metadata": {"labels": {"app": "workflow-controller"}},
                "spec": {"containers": [{"name": "workflow-controller", "image": image}]},
            },
        },
    }


def _labelled(obj: dict[str, Any], selector: str | None) -> bool:
    return matches(obj["metadata"].get("labels") or {}, selector)


def _page(
    state: KubeState,
    kind: str,
    scope: tuple[str | None, ...],
    listing: Callable[[], list[dict[str, Any]]],
    query: dict[str, str],
) -> dict[str, Any]:
    """A page of a list as ``limit`` and ``continue`` ask: a token names the list's version
    and where the next page starts, and is refused (410) once that version is compacted.
    A continued page is cut from the list at its first page's version, as etcd reads it:
    the list of ``kind`` in ``scope`` (its namespace, selectors) is kept while pages of it
    are to read (``KubeState.keep_list``), else ``listing`` lists it anew."""
    version, start = state.version(), 0
    if token := query.get("continue"):
        try:
            found = json.loads(base64.b64decode(token))
            listed, start = int(found["rv"]), int(found["start"])
        except (ValueError, KeyError, TypeError):
            raise ApiError(400, "BadRequest", "continue key is not valid") from None
        if listed <= state.compacted:
            raise ApiError(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.",
            )
        version = str(listed)
    key = (kind, *scope, version)
    items = state.lists.get(key) if token else None
    if items is None:
        items = listing()
    limit = int(query.get("limit") or 0)
    page = items[start : start + limit] if limit else items[start:]
    body = _list_body(kind, page, version)
    if limit and start + limit < len(items):
        following = {"rv": int(version), "start": start + limit}
        body["metadata"]["continue"] = base64.b64encode(json.dumps(following).encode()).decode()
        body["metadata"]["remainingItemCount"] = len(items) - start - limit
        state.keep_list(key, items)
    return body


def _list_body(kind: str, items: list[dict[str, Any]], version: str) -> dict[str, Any]:
    groups = {"WorkflowList": "argoproj.io/v1alpha1"}
    group = groups.get(kind, "v1")
    return {
        "kind": kind,
        "apiVersion": group,
        "metadata": {"resourceVersion": version},
        "items": items,
    }


class KubeApiServer(ThreadingHTTPServer):
    """The server; ``url`` is its address, ``state`` what it holds."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = KubeState()
        self.closing = threading.Event()
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def client(self, account: str = "simrun-worker") -> ApiClient:
        """A ``kubernetes`` client of this server with the token of a ServiceAccount of
        docker/k8s/ (the Celery worker's unless named; ``cluster-admin`` for everything)."""
        configuration = Configuration(host=self.url)
        configuration.api_key = {"authorization": token_of(account)}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return ApiClient(configuration)

    def __enter__(self) -> KubeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=10)


def _of_kind(body: Any, api_version: str, kind: str) -> dict[str, Any]:
    """The body of a create, refused as the API server refuses one that is no object or names
    another version or kind than the path's."""
    if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
        raise ApiError(400, "BadRequest", "the body of the request is no object")
    if (body.get("apiVersion"), body.get("kind")) != (api_version, kind):
        raise ApiError(
            400,
            "BadRequest",
            f"the API version in the data ({body.get('apiVersion')}) does not match the "
            f"expected API version ({api_version}) or the kind ({body.get('kind')})",
        )
    return body
