"""The DAG nodes of an Argo Workflow, found by name in its node map (Argo's node map:
``status.nodes``, each node with its type, phase, children and template).

Nodes are found by name in ``status.nodes`` (or the gzip'd ``status.compressedNodes``): a DAG
task ``T`` is the node ``<wf>.T`` (a Retry node with its attempts ``<wf>.T(<n>)``), a fan-out
child ``<wf>.T-extra(<i>:<n>)`` with its attempts ``<wf>.T-extra(<i>:<n>)(<m>)``, each
behind ``<part>.`` in a DAG nested in parts (``dag_parts``). Children lists are not used: in a
DAG they also carry dependency edges.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import re
from dataclasses import dataclass, field
from typing import Any

NODE_NAME = re.compile(r"^(?P<node>[a-z][a-z0-9-]*(?:\(\d+:[^()]*\))?)(?:\((?P<attempt>\d+)\))?$")
"""A DAG node below the root and its part (``node_path``): a task or a fan-out child, then an
attempt number."""
PART = re.compile(r"^Part\d+\.")


def node_path(name: str, workflow_name: str) -> str:
    """An Argo node's name below the Workflow and its part: ``T-w0(1)`` of
    ``<wf>.Part2.T-w0(1)``."""
    return PART.sub("", name.removeprefix(f"{workflow_name}."))


class NodesUnavailable(RuntimeError):
    """The Workflow's nodes are not in the object (offloaded to a database, or compressed
    with an algorithm Python cannot read): the status is unknown, not empty."""


@dataclass
class DagNode:
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


def dag_nodes(workflow: dict[str, Any]) -> dict[str, DagNode]:
    """The DAG nodes of a Workflow by simrun's name (``<task>-w0``, ``<task>-extra(<i>:<n>)``),
    each with its attempts in order."""
    workflow_name = workflow["metadata"]["name"]
    found: dict[str, DagNode] = {}
    for node in workflow_nodes(workflow).values():
        name = node.get("name") or ""
        if not name.startswith(f"{workflow_name}.") or node.get("type") == "TaskGroup":
            continue
        match = NODE_NAME.match(node_path(name, workflow_name))
        if match is None:
            continue
        entry = found.setdefault(match["node"], DagNode())
        if match["attempt"] is not None and node.get("type") == "Pod":
            entry.attempts.append((int(match["attempt"]), node))
        elif match["attempt"] is None:
            entry.node = node
    for entry in found.values():
        entry.attempts.sort(key=lambda pair: pair[0])
        if not entry.attempts and entry.node is not None and entry.node.get("type") == "Pod":
            entry.attempts = [(0, entry.node)]  # a pod without a retry strategy
    return found
