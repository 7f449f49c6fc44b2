"""The pods of the runs that have not terminated, with their nodes and requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from runs.backends.argo.clients import Clients
from runs.backends.argo.manifest import DAG_TASK_LABEL, RUN_LABEL
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
    """Every pod of a run that has not terminated, with its node, requests and worker."""
    pods = clients.core.list_namespaced_pod(clients.namespace, label_selector=RUN_LABEL).items
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
        env = main_env(pod)
        found.append(
            Placement(
                workflow=labels[WORKFLOW_LABEL],
                dag_task=labels.get(DAG_TASK_LABEL, ""),
                pod=pod.metadata.name,
                node=pod.spec.node_name,
                phase=phase,
                cores=float(sum(quantity(r.get("cpu", "0")) for r in requests)),
                memory_gb=float(sum(quantity(r.get("memory", "0")) for r in requests)) / GIB,
                worker=env.get("SIMRUN_WORKER") or None,
                attempt=attempt(pod),
            )
        )
    return found


def main_env(pod: Any) -> dict[str, str]:
    for container in pod.spec.containers:
        if container.name == "main":
            return {e.name: e.value or "" for e in container.env or []}
    return {}


def attempt(pod: Any) -> int | None:
    """The attempt of a pod from its ``SIMRUN_ATTEMPT``, None when it has none."""
    value = main_env(pod).get("SIMRUN_ATTEMPT", "")
    return int(value) if value.isdigit() else None
