"""The pods of the runs that have not terminated, with their nodes and requests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runs.backends.argo.nodes import GIB, quantity
from runs.backends.argo.pod_cache import WORKFLOW_LABEL
from runs.backends.argo.pod_templates import DAG_TASK_LABEL
from runs.backends.base import Placement

TERMINATED = frozenset({"Succeeded", "Failed"})


def placements(pods: Iterable[dict[str, Any]]) -> list[Placement]:
    """Every pod of a run that has not terminated, with its node, requests and worker, of the
    runs' pods (JSON, from the ``pod_cache``)."""
    found = []
    for pod in pods:
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
