"""The pods of the runs that have not terminated, with their nodes and requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from runs.backends.argo.clients import Clients
from runs.backends.argo.manifest import DAG_TASK_LABEL, runs_selector
from runs.backends.argo.nodes import GIB, quantity
from runs.backends.base import Placement

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
TERMINATED = frozenset({"Succeeded", "Failed"})


PAGE_SIZE = 500
"""Pods per page of a list: a large list in one answer weighs on the API server."""


def listed_pods(clients: Clients, selector: str) -> Iterator[dict[str, Any]]:
    """The pods of a label selector as the API server wrote them (JSON, as the pure ``status``
    reads them, not the client's models), a page at a time."""
    token: str | None = None
    while True:
        response: Any = clients.core.list_namespaced_pod(
            clients.namespace,
            label_selector=selector,
            limit=PAGE_SIZE,
            _continue=token,
            _preload_content=False,
        )
        page = json.loads(response.data)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return


def placements(clients: Clients) -> list[Placement]:
    """Every pod of a run that has not terminated, with its node, requests and worker: a
    paginated list of the runs' pods, read as JSON (the client's models cost seconds for a
    thousand pods)."""
    found = []
    for pod in listed_pods(clients, runs_selector(clients.cluster)):
        meta, spec = pod["metadata"], pod.get("spec") or {}
        labels = meta.get("labels") or {}
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if phase in TERMINATED or WORKFLOW_LABEL not in labels:
            continue
        requests = [
            (c.get("resources") or {}).get("requests") or {} for c in spec.get("containers") or []
        ]
        env = _env_of(spec)
        found.append(
            Placement(
                workflow=labels[WORKFLOW_LABEL],
                dag_task=labels.get(DAG_TASK_LABEL, ""),
                pod=meta["name"],
                node=spec.get("nodeName"),
                phase=phase,
                cores=float(sum(quantity(r.get("cpu", "0")) for r in requests)),
                memory_gb=float(sum(quantity(r.get("memory", "0")) for r in requests)) / GIB,
                worker=env.get("SIMRUN_WORKER") or None,
                attempt=pod_attempt(pod),
            )
        )
    return found


def _env_of(spec: dict[str, Any]) -> dict[str, str]:
    """The plain environment of a pod's ``main`` container (JSON)."""
    for container in spec.get("containers") or []:
        if container.get("name") == "main":
            return {e["name"]: e.get("value") or "" for e in container.get("env") or []}
    return {}


def pod_attempt(pod: dict[str, Any]) -> int | None:
    """The attempt of a pod (JSON) from its ``SIMRUN_ATTEMPT``, None when it has none."""
    value = _env_of(pod.get("spec") or {}).get("SIMRUN_ATTEMPT", "")
    return int(value) if value.isdigit() else None
