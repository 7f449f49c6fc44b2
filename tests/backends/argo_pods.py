"""The pods Argo's controller (v4.1, emissary executor) makes of a Workflow's pod templates.

For each container template: its ``init`` and ``wait`` executor containers (with the security
context docs/cluster.md gives the executor), the template's container as ``main``, the
Workflow's pod-wide fields (service account, security context, volumes, node selector,
tolerations, pull secrets, ``podMetadata``), the template's labels, and its ``podSpecPatch``
substituted for the attempt (``retries``, ``lastRetry``) and applied as Argo applies it: a
strategic merge patch, containers merged by name. A fan-out's parameters take
their first item. The pods are what the stand-in holds to the API server's rules.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from tests.backends.argo_runs import substitute
from tests.backends.argo_workflows import fnv1a_32

EXECUTOR_IMAGE = "quay.io/argoproj/argoexec:v4.1.2"
EXECUTOR_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 8737,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The ``executor.securityContext`` of the controller's ConfigMap, as docs/cluster.md says."""
EXECUTOR_RESOURCES = {"requests": {"cpu": "10m", "memory": "64Mi"}}
ARGO_MOUNT = {"name": "var-run-argo", "mountPath": "/var/run/argo"}
FIRST = {"exitCode": "0", "status": "", "duration": "0", "message": ""}
AFTER_A_MEMORY_KILL = {
    "exitCode": "137",
    "status": "Failed",
    "duration": "60",
    "message": "main: OOMKilled (exit code 137)",
}
ATTEMPTS = {0: FIRST, 1: AFTER_A_MEMORY_KILL}
"""The attempts rendered: the first, and the retry after a kill for memory."""
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
}
"""The lists a strategic merge patch of a PodSpec merges by a key (the others it replaces)."""


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """A strategic merge patch as the API server (and Argo's ``ApplyPodSpecPatch``) applies
    it to a PodSpec: maps merged, lists of ``MERGE_KEYS`` merged by their key, others replaced."""
    if isinstance(patch, dict) and isinstance(target, dict):
        result = dict(target)
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = strategic_merge(target.get(key), value, key)
        return result
    if isinstance(patch, list) and isinstance(target, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        merged = [copy.deepcopy(item) for item in target]
        for item in patch:
            at = next((i for i, old in enumerate(merged) if old.get(key) == item.get(key)), None)
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = strategic_merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)


def argo_pods(workflow: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(template name, attempt, pod) for each container template and attempt of ``ATTEMPTS``."""
    spec = workflow.get("spec") or {}
    arguments = _arguments(spec)
    for template in spec.get("templates") or []:
        if "container" not in template:
            continue
        for attempt, last in ATTEMPTS.items():
            values = {**arguments.get(template["name"], {}), "retries": str(attempt)}
            yield template["name"], attempt, argo_pod(workflow, template, values, last)


def argo_pod(
    workflow: dict[str, Any],
    template: dict[str, Any],
    values: Mapping[str, str],
    last: Mapping[str, str],
) -> dict[str, Any]:
    """The pod of one attempt of a template."""
    wf_meta, spec = workflow["metadata"], workflow.get("spec") or {}
    rendered = json.loads(_fill(json.dumps(template), values))
    node = f"{wf_meta['name']}.{template['name']}({values['retries']})"
    main = {"name": "main", **rendered["container"]}
    main["volumeMounts"] = [*(main.get("volumeMounts") or []), ARGO_MOUNT]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": spec.get("serviceAccountName", "default"),
        "initContainers": [
            _executor("init"),
            *(rendered.get("initContainers") or []),
        ],
        "containers": [_executor("wait"), main],
        "volumes": [
            {"name": "var-run-argo", "emptyDir": {}},
            *(spec.get("volumes") or []),
            *(rendered.get("volumes") or []),
        ],
    }
    for field in ("securityContext", "nodeSelector", "tolerations", "imagePullSecrets"):
        value = rendered.get(field, spec.get(field))
        if value:
            pod_spec[field] = copy.deepcopy(value)
    if patch := rendered.get("podSpecPatch"):
        pod_spec = strategic_merge(pod_spec, json.loads(substitute(patch, last)))
    labels = {
        "workflows.argoproj.io/workflow": wf_meta["name"],
        "workflows.argoproj.io/completed": "false",
        **((spec.get("podMetadata") or {}).get("labels") or {}),
        **((rendered.get("metadata") or {}).get("labels") or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{wf_meta['name']}-{template['name']}-{fnv1a_32(node)}",
            "namespace": wf_meta.get("namespace", "default"),
            "labels": labels,
            "annotations": {
                "workflows.argoproj.io/node-name": node,
                "workflows.argoproj.io/node-id": f"{wf_meta['name']}-{fnv1a_32(node)}",
                "kubectl.kubernetes.io/default-container": "main",
            },
        },
        "spec": pod_spec,
    }


def _executor(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": EXECUTOR_IMAGE,
        "command": ["argoexec", name],
        "resources": copy.deepcopy(EXECUTOR_RESOURCES),
        "securityContext": copy.deepcopy(EXECUTOR_SECURITY),
        "volumeMounts": [dict(ARGO_MOUNT)],
    }


def _arguments(spec: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The input parameters of each template, as the DAG task calling it passes them for its
    first item."""
    found: dict[str, dict[str, str]] = {}
    for template in spec.get("templates") or []:
        for task in (template.get("dag") or {}).get("tasks") or []:
            item = str((task.get("withSequence") or {}).get("start", "0"))
            parameters = (task.get("arguments") or {}).get("parameters") or []
            found[task["template"]] = {
                f"inputs.parameters.{p['name']}": str(p.get("value", "")).replace("{{item}}", item)
                for p in parameters
            }
    return found


def _fill(text: str, values: Mapping[str, str]) -> str:
    """Replace Argo's ``{{name}}`` variables (not the ``{{=expression}}`` ones)."""
    return re.sub(r"\{\{([a-z][\w.]*)\}\}", lambda m: values.get(m[1], m[0]), text)
