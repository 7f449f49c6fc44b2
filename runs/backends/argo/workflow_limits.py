"""What a Workflow may hold on a cluster: Argo's CRD and the API server's object size.

Argo 4.0's full CRD caps ``spec.templates`` and the tasks of a DAG at 200 items (the API server
refuses more with 422); Argo stores a Workflow in etcd, so it "must be under 1MB" (Argo's
docs, "Offloading Large Workflows"): its controller fails one past 1 MiB with its status, the
nodes compressed (``node_status``), in the middle of its run; etcd refuses a larger request
("request is too large", a 500), the API server a body over 3 MiB (413). A run whose
Workflow, with the status it will have, is past any of them is refused at its submission,
never POSTed.

The layout keeps a run inside the first two (``manifest``): one pod template a kind of pod
(five at most) and one DAG template a part of 200 DAG tasks, so 200 templates hold 194 parts,
far more tasks than a spec may have (500); the bytes bind first, about 360 bytes a command
task and 1.1 KB a split task (three DAG tasks), plus the task's command and inputs, and about
35 bytes a node of the status (two a task and a worker) plus its inputs, once compressed.
"""

from __future__ import annotations

import json
from typing import Any

from runs.backends.argo.node_status import status_bytes

TEMPLATES_MAX = 200
"""``spec.templates`` items, Argo 4.0's full CRD."""
DAG_TASKS_MAX = 200
"""``dag.tasks`` items of one template, Argo 4.0's full CRD."""
WORKFLOW_BYTES_MAX = 1 << 20
"""The Workflow's JSON with its status by the run's end: Argo's ``MAX_WORKFLOW_SIZE``."""


def workflow_bytes(manifest: dict[str, Any]) -> int:
    """The size of a Workflow as the client sends it (compact JSON)."""
    return len(json.dumps(manifest, separators=(",", ":")).encode())


def workflow_refusal(manifest: dict[str, Any]) -> str:
    """Why a Workflow cannot be created on a cluster ("" when it can), naming the limit."""
    spec = manifest.get("spec") or {}
    templates = spec.get("templates") or []
    if len(templates) > TEMPLATES_MAX:
        return (
            f"the run needs {len(templates)} Argo templates, more than the {TEMPLATES_MAX} "
            "Argo's Workflow CRD allows (spec.templates): split it into smaller runs"
        )
    for template in templates:
        tasks = (template.get("dag") or {}).get("tasks") or []
        if len(tasks) > DAG_TASKS_MAX:
            return (
                f"the run needs {len(tasks)} DAG tasks, more than the {DAG_TASKS_MAX} Argo's "
                "Workflow CRD allows in one DAG (dag.tasks): split it into smaller runs"
            )
    size = workflow_bytes(manifest)
    if size > WORKFLOW_BYTES_MAX:
        return (
            f"the run's Argo Workflow would be {size / 2**20:.2f} MiB, more than the 1 MiB a "
            "Workflow may be in etcd: split it into smaller runs"
        )
    nodes, status = status_bytes(manifest)
    if size + status > WORKFLOW_BYTES_MAX:
        return (
            f"the run's Argo Workflow would be {(size + status) / 2**20:.2f} MiB, more than "
            f"the 1 MiB a Workflow may be in etcd, with the status Argo keeps of its {nodes:,} "
            f"nodes ({status / 2**10:,.0f} KiB compressed): split it into smaller runs"
        )
    return ""
