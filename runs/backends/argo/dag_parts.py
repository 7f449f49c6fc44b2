"""A run's DAG within Argo's cap of 200 tasks a DAG: flat when it fits, else nested in parts.

Argo 4.0's CRD holds a DAG template to 200 tasks (``workflow_limits``). A run with more DAG
nodes gets an entry DAG of parts ``Part1``, ``Part2``, ... (DAG templates of their own, upper
case so no task id can be one), each holding whole tasks in an order where a task comes after
those it reads. A task's dependencies inside its part stay; one on a task of an earlier part
becomes a dependency of its part on that part, so such a task waits for the whole earlier
part: what nesting costs, and only runs past 200 DAG nodes pay it. Argo names a node in a part
``<workflow>.<part>.<task>`` (``dag_nodes`` reads both forms).
"""

from __future__ import annotations

from collections.abc import Mapping
from graphlib import TopologicalSorter
from typing import Any

PART_PREFIX = "Part"


def nested(
    units: Mapping[str, list[dict[str, Any]]],
    reads: Mapping[str, set[str]],
    entrypoint: str,
    limit: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The entry DAG template and the part templates of a run.

    ``units``: the DAG nodes of each task (a split task's stay in one part); ``reads``: the
    tasks of ``units`` each task reads; ``limit``: the most tasks of one DAG.
    """
    if sum(len(nodes) for nodes in units.values()) <= limit:
        return _dag(entrypoint, [node for nodes in units.values() for node in nodes]), []
    parts: list[list[str]] = [[]]
    size = 0
    for task_id in TopologicalSorter({t: reads[t] for t in units}).static_order():
        if size + len(units[task_id]) > limit:
            parts.append([])
            size = 0
        parts[-1].append(task_id)
        size += len(units[task_id])
    part_of = {task_id: n for n, part in enumerate(parts, 1) for task_id in part}
    outer, templates = [], []
    for n, part in enumerate(parts, 1):
        name = f"{PART_PREFIX}{n}"
        inside = {node["name"] for task_id in part for node in units[task_id]}
        nodes = []
        for task_id in part:
            for node in units[task_id]:
                node = dict(node)
                if dependencies := [d for d in node.pop("dependencies", []) if d in inside]:
                    node["dependencies"] = dependencies
                nodes.append(node)
        templates.append(_dag(name, nodes))
        earlier = sorted({part_of[src] for t in part for src in reads[t]} - {n})
        after = {"dependencies": [f"{PART_PREFIX}{m}" for m in earlier]} if earlier else {}
        outer.append({"name": name, "template": name, **after})
    return _dag(entrypoint, outer), templates


def _dag(name: str, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    # Without failFast a failed node does not keep the others from starting; the controller,
    # not Argo, decides the run (Ruling 17b) and stops the workflow.
    return {"name": name, "dag": {"failFast": False, "tasks": tasks}}
