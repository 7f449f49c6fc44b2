"""The status Argo keeps of a Workflow's nodes, as it will weigh by the run's end.

Argo holds a Workflow, its status included, to its ``MAX_WORKFLOW_SIZE`` (1 MiB): past it, it
compresses the node map into ``status.compressedNodes`` (gzip, then base64), and a Workflow
still past it is failed ("workflow is longer than maximum allowed size", Argo's ``packer``) in
the middle of its run, unless a database takes the nodes. So what a run's Workflow may weigh
as it is created is 1 MiB less its nodes, compressed. Each DAG task makes a Retry node and a
Pod node an attempt (a fan-out a TaskGroup and both for each item, a nested DAG a DAG node),
each naming its template, its boundary and times, and carrying the task's inputs (its
command, image and the other parameters), so the status grows with the tasks and their
arguments: ``status_bytes`` builds the node map of one attempt a node, as Argo writes it, and
compresses it as Argo does.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from typing import Any

TIME = "2026-01-01T00:00:00Z"
"""A timestamp of the length Argo writes."""


def _fnv1a_32(text: str) -> int:
    """Argo's node id hash (FNV-1a, 32 bits) of a node's name."""
    value = 2166136261
    for byte in text.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return value


def _node(workflow: str, name: str, kind: str, template: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": f"{workflow}-{_fnv1a_32(name)}",
        "name": name,
        "displayName": name.rsplit(".", 1)[-1],
        "type": kind,
        "templateName": template,
        "templateScope": f"local/{workflow}",
        "phase": "Succeeded",
        "startedAt": TIME,
        "finishedAt": TIME,
        "progress": "1/1",
        "resourcesDuration": {"cpu": 100000, "memory": 100000},
        **fields,
    }


def nodes(manifest: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The nodes Argo makes of a Workflow by its end, one attempt each."""
    workflow = manifest["metadata"]["name"]
    spec = manifest.get("spec") or {}
    templates = {t["name"]: t for t in spec.get("templates") or []}
    entry = spec.get("entrypoint", "")
    yield _node(workflow, workflow, "DAG", entry)

    def dag(template: str, prefix: str, boundary: str) -> Iterator[dict[str, Any]]:
        for task in (templates.get(template) or {}).get("dag", {}).get("tasks") or []:
            name, callee = f"{prefix}.{task['name']}", task["template"]
            if "dag" in (templates.get(callee) or {}):
                yield _node(workflow, name, "DAG", callee, boundaryID=boundary)
                yield from dag(callee, name, f"{workflow}-{_fnv1a_32(name)}")
                continue
            parameters = (task.get("arguments") or {}).get("parameters") or []
            sequence = task.get("withSequence")
            if sequence is None:
                yield from _attempt(workflow, name, callee, boundary, parameters, "")
                continue
            yield _node(workflow, name, "TaskGroup", callee, boundaryID=boundary)
            start, end = int(sequence.get("start", "0")), int(sequence.get("end", "0"))
            for index, item in enumerate(range(start, end + 1)):
                item_name = f"{name}({index}:{item})"
                yield from _attempt(workflow, item_name, callee, boundary, parameters, str(item))

    yield from dag(entry, workflow, workflow)


def _attempt(
    workflow: str,
    name: str,
    template: str,
    boundary: str,
    parameters: list[dict[str, Any]],
    item: str,
) -> Iterator[dict[str, Any]]:
    """A DAG task's Retry node and its first attempt's Pod node, each with its inputs."""
    inputs = {
        "parameters": [
            {"name": p["name"], "value": str(p.get("value", "")).replace("{{item}}", item)}
            for p in parameters
        ]
    }
    pod = f"{name}(0)"
    yield _node(
        workflow,
        name,
        "Retry",
        template,
        boundaryID=boundary,
        inputs=inputs,
        children=[f"{workflow}-{_fnv1a_32(pod)}"],
        outputs={"exitCode": "0"},
    )
    yield _node(
        workflow,
        pod,
        "Pod",
        template,
        boundaryID=boundary,
        inputs=inputs,
        hostNodeName="node-" + "x" * 24,
        outputs={"exitCode": "0"},
        nodeFlag={"retried": True},
    )


STATUS_FIELDS_BYTES = 1024
"""The status's other fields: its phase, times, progress, conditions and the like."""


def status_bytes(manifest: dict[str, Any]) -> tuple[int, int]:
    """How many nodes a Workflow will have, and the bytes of the status Argo writes of them by
    its end: ``compressedNodes`` (gzip of their JSON, in base64), ``taskResultsCompletionStatus``
    (one entry a Pod node, not compressed) and its other fields (``STATUS_FIELDS_BYTES``)."""
    made = {node["id"]: node for node in nodes(manifest)}
    raw = json.dumps(made, separators=(",", ":")).encode()
    results = {node["id"]: True for node in made.values() if node["type"] == "Pod"}
    compressed = len(base64.b64encode(gzip.compress(raw)))
    return len(made), compressed + len(json.dumps(results)) + STATUS_FIELDS_BYTES
