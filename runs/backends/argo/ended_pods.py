"""The pods of a Workflow that ended, named from its node map alone (Argo's pod names, ``v2``:
``<workflow>-<template>-<hash of the node id>``).

Argo names a Pod node's pod from the node: ``v1`` (the controller's ``POD_NAMES``) by its id,
``v2`` (the default since 3.4) as ``<workflow>-<template>-<the number of its id>``, the prefix
cut to 242 characters. So the status cache knows, without asking the API server, which pods
ended and what they are called: keeping their logs reads only those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from runs.backends.argo.dag_nodes import dag_nodes
from runs.backends.base import FINAL_PHASES

POD_NAME_FORMAT = "workflows.argoproj.io/pod-name-format"
PREFIX_LENGTH = 242
"""Argo's longest pod name prefix: 253 characters less the hash and its dash."""
STAGE_CONTAINER = "stage"
"""The init container that stages a command task's inputs (``manifest``)."""


@dataclass(frozen=True)
class EndedPod:
    """A pod of a DAG node whose attempt ended, as its log is kept."""

    node: str
    """The DAG node, simrun's name: ``<task>-w0``, ``<task>-extra(<i>:<n>)``, ``<task>``."""
    attempt: int
    pod: str
    stage: bool
    """Whether it has the ``stage`` init container, whose log goes before its main's."""


def belongs(node: str, task_id: str) -> bool:
    """Whether a DAG node is one of a task's: ``T``, ``T-w0``, ``T-merge``, ``T-extra(i:n)``."""
    return bool(re.fullmatch(rf"{re.escape(task_id)}(?:-w0|-merge|-extra\(\d+:[^()]*\))?", node))


def pod_name(workflow: dict[str, Any], node: dict[str, Any]) -> str:
    """The name of the pod of a Pod node, as Argo's controller gave it."""
    name = workflow["metadata"]["name"]
    annotations = workflow["metadata"].get("annotations") or {}
    if annotations.get(POD_NAME_FORMAT) == "v1":
        return str(node["id"])
    if node.get("name") == name:
        return str(name)
    template = (node.get("templateRef") or {}).get("template") or node.get("templateName")
    prefix = f"{name}-{template}" if template else str(name)
    return f"{prefix[:PREFIX_LENGTH]}-{str(node['id']).rsplit('-', 1)[-1]}"


def ended_pods(workflow: dict[str, Any]) -> tuple[EndedPod, ...]:
    """The pods of the Workflow's attempts that ended (their node final), by DAG node."""
    staged = {
        t.get("name")
        for t in (workflow.get("spec") or {}).get("templates") or []
        if any(c.get("name") == STAGE_CONTAINER for c in t.get("initContainers") or [])
    }
    found = []
    for dag_node, entry in sorted(dag_nodes(workflow).items()):
        for attempt, node in entry.attempts:
            if node.get("phase") in FINAL_PHASES and node.get("id"):
                template = (node.get("templateRef") or {}).get("template") or node.get(
                    "templateName"
                )
                found.append(
                    EndedPod(dag_node, attempt, pod_name(workflow, node), template in staged)
                )
    return tuple(found)
