"""The status of a run from its Argo Workflow: a pure function of the Workflow object.

Nodes are found by name in ``status.nodes`` (or the gzip'd ``status.compressedNodes``): a DAG
task ``T`` is the node ``<wf>.T`` (a Retry node with its attempts ``<wf>.T(<n>)``), a fan-out
child ``<wf>.T-extra(<i>:<n>)`` with its attempts ``<wf>.T-extra(<i>:<n>)(<m>)``. Children
lists are not used: in a DAG they also carry dependency edges (reference §1.1).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import re
from dataclasses import dataclass, field
from typing import Any

from runs.backends.argo_manifest import EVICTION_PATTERN
from runs.backends.base import (
    FINAL_PHASES,
    PREEMPTED_PHASE,
    RETRYING_PHASE,
    BackendStatus,
    FailedAttempt,
    worker_of_node,
)

NODE_NAME = re.compile(r"^(?P<node>[a-z][a-z0-9-]*(?:\(\d+:[^()]*\))?)(?:\((?P<attempt>\d+)\))?$")
"""A DAG node below the root: a task or a fan-out child, then an attempt number."""
EVICTION = re.compile(EVICTION_PATTERN)
AUTO_RESTART = "Pod auto-restarting"
"""The message of a node whose evicted pod Argo (v4, failedPodRestart) restarts itself."""
SHUTDOWN = "workflow shutdown"
OOM_KILLED = re.compile(r"^(main: )?OOMKilled\b")
"""The message of a node whose main container was killed for memory: ``main: OOMKilled (exit
code 137)`` since Argo 3.7, without the container before; a wait container's is no kill."""
FAILED_PHASES = frozenset({"Failed", "Error"})


class NodesUnavailable(RuntimeError):
    """The Workflow's nodes are not in the object (offloaded to a database, or compressed
    with an algorithm Python cannot read): the status is unknown, not empty."""


@dataclass
class _DagNode:
    """A node of the DAG as simrun names it, with the Argo nodes that make it up."""

    node: dict[str, Any] | None = None
    attempts: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def workflow_nodes(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The node map of a Workflow, decoded from ``compressedNodes`` when Argo compressed it."""
    status = workflow.get("status") or {}
    if status.get("nodes"):
        return dict(status["nodes"])
    compressed = status.get("compressedNodes")
    if compressed:
        try:
            raw = base64.b64decode(compressed)
        except (binascii.Error, ValueError) as error:
            raise NodesUnavailable(f"compressedNodes is not base64: {error}") from None
        if not raw.startswith(b"\x1f\x8b"):
            raise NodesUnavailable(
                "compressedNodes is not gzip: set the controller's "
                "WORKFLOW_COMPRESSION_ALGORITHM to gzip"
            )
        return dict(json.loads(gzip.decompress(raw)))
    if status.get("offloadNodeStatusVersion"):
        raise NodesUnavailable("the node status is offloaded to Argo's database")
    return {}


def is_eviction(node: dict[str, Any]) -> bool:
    """Whether a failed attempt was evicted, preempted, drained or deleted, not failed itself.

    Its message says so (kubelet, Kueue, a deleted pod), or its main container stopped on
    SIGTERM (143) outside a shutdown of the workflow.
    """
    message = node.get("message") or ""
    if EVICTION.search(message):
        return True
    return exit_code(node) == 143 and SHUTDOWN not in message


def exit_code(node: dict[str, Any]) -> int | None:
    """The exit code of a Pod node's main container, None without one."""
    value = (node.get("outputs") or {}).get("exitCode")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _dag_nodes(workflow: dict[str, Any]) -> dict[str, _DagNode]:
    prefix = f"{workflow['metadata']['name']}."
    found: dict[str, _DagNode] = {}
    for node in workflow_nodes(workflow).values():
        name = node.get("name") or ""
        if not name.startswith(prefix) or node.get("type") == "TaskGroup":
            continue
        match = NODE_NAME.match(name[len(prefix) :])
        if match is None:
            continue
        entry = found.setdefault(match["node"], _DagNode())
        if match["attempt"] is not None and node.get("type") == "Pod":
            entry.attempts.append((int(match["attempt"]), node))
        elif match["attempt"] is None:
            entry.node = node
    for entry in found.values():
        entry.attempts.sort(key=lambda pair: pair[0])
        if not entry.attempts and entry.node is not None and entry.node.get("type") == "Pod":
            entry.attempts = [(0, entry.node)]  # a pod without a retry strategy
    return found


def _phase(entry: _DagNode) -> str:
    """The phase simrun reports: Argo's, or Preempted/Retrying while a retry waits."""
    last = entry.attempts[-1][1] if entry.attempts else None
    phase = (entry.node or last or {}).get("phase") or "Pending"
    if phase in FINAL_PHASES:
        return str(phase)
    if last is None:
        return "Pending"
    if (last.get("message") or "").startswith(AUTO_RESTART):
        return PREEMPTED_PHASE
    if last.get("phase") in FAILED_PHASES:
        return PREEMPTED_PHASE if is_eviction(last) else RETRYING_PHASE
    return str(last.get("phase") or "Pending")


def _failed(attempts: list[tuple[int, dict[str, Any]]]) -> list[FailedAttempt]:
    return [
        FailedAttempt(
            attempt=number,
            exit_code=exit_code(node),
            oom_killed=bool(OOM_KILLED.match(node.get("message") or "")),
            evicted=is_eviction(node),
            node=node.get("hostNodeName") or None,
            message=node.get("message") or "",
        )
        for number, node in attempts
        if node.get("phase") in FAILED_PHASES
    ]


def status_from_workflow(workflow: dict[str, Any]) -> BackendStatus:
    """The status of a Workflow: phases of its DAG nodes, failed attempts, hosts.

    Raises ``NodesUnavailable`` when the nodes are not in the object.
    """
    status = workflow.get("status") or {}
    tasks: dict[str, str] = {}
    failed: dict[str, list[FailedAttempt]] = {}
    hosts: dict[str, str] = {}
    for name, entry in sorted(_dag_nodes(workflow).items()):
        tasks[name] = _phase(entry)
        if attempts := _failed(entry.attempts):
            failed.setdefault(worker_of_node(name), []).extend(attempts)
        for _, node in reversed(entry.attempts):
            if node.get("hostNodeName"):
                hosts[name] = node["hostNodeName"]
                break
    return BackendStatus(
        phase=status.get("phase") or "Pending",
        tasks=tasks,
        failed=failed,
        hosts=hosts,
        message=status.get("message") or "",
    )
