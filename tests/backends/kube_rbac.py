"""Kubernetes' RBAC as docker/k8s/ grants it, for the strict stand-in (``kube_api``).

A request is authorized as the API server authorizes it: its path and method make a verb on a
resource (``get``, ``list``, ``watch``, ``create``, ``patch``, ``delete`` on ``pods``,
``pods/log``, ``workflows``…) in a namespace or cluster-wide, which one of the Roles or
ClusterRoles bound to its ServiceAccount must grant. Discovery (``/api``, ``/apis/...`` with
no resource) is allowed to every authenticated account, as ``system:discovery`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Grant = tuple[str, str, str, str]
"""(namespace, api group, resource, verb); the namespace "" for a cluster-wide grant."""


def grants(documents: Iterable[dict[str, Any]], account: str, namespace: str) -> set[Grant]:
    """What the RBAC objects of ``documents`` grant a ServiceAccount."""
    documents = list(documents)
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in documents
        if d["kind"] in ("Role", "ClusterRole")
    }
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    found: set[Grant] = set()
    for binding in documents:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if subject not in binding.get("subjects") or []:
            continue
        where = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], where if ref["kind"] == "Role" else "", ref["name"]))
        for rule in (role or {}).get("rules") or []:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    found |= {(where, group, resource, verb) for verb in rule["verbs"]}
    return found


def needed(method: str, path: str, query: dict[str, str]) -> Grant | None:
    """The grant a request needs; None for discovery, which every account may read."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = (parts[1] if len(parts) > 1 else ""), parts[3:]
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        verb = "get" if named else ("watch" if query.get("watch") == "true" else "list")
    else:
        verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}[method]
    return namespace, group, resource, verb


def allowed(granted: set[Grant], grant: Grant) -> bool:
    """Whether a grant is held: in its namespace, or cluster-wide by a ClusterRoleBinding."""
    namespace, group, resource, verb = grant
    return bool({(namespace, group, resource, verb), ("", group, resource, verb)} & granted)


def forbidden_message(account: str, namespace: str, grant: Grant) -> str:
    """The API server's words for a request RBAC does not allow."""
    where, group, resource, verb = grant
    scope = f' in the namespace "{where}"' if where else " at the cluster scope"
    return (
        f'{resource} is forbidden: User "system:serviceaccount:{namespace}:{account}" cannot '
        f'{verb} resource "{resource}" in API group "{group}"{scope}'
    )
