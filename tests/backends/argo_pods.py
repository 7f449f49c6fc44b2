"""The pods Argo's controller (v4.1, emissary executor) makes of a Workflow's pod templates.

For each DAG task that calls a container template, from the entrypoint through nested DAGs:
the template with its input parameters substituted as Argo does (each from the task's
``arguments``, else its ``default``; one not supplied, or a ``{{inputs.parameters.x}}`` the
template does not declare, makes the Workflow invalid, ``ArgoInvalid``; values escaped for
the JSON string they land in, as Argo's ``simpleReplace`` quotes them), then its ``init`` and
``wait`` executor containers (with the security context docs/cluster.md gives the executor),
the template's container as ``main``, the Workflow's pod-wide fields (service account, security
context, volumes, node selector, tolerations, pull secrets, ``podMetadata``), the template's
labels, and its ``podSpecPatch`` substituted for the attempt (``retries``, ``lastRetry``, the
inputs) and applied as Argo applies it, before it wraps the command in ``argoexec``: a
strategic merge patch, containers merged by name. A fan-out takes its first item. The pods
are what the stand-in holds to the API server's rules.
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


class ArgoInvalid(ValueError):
    """A Workflow Argo's controller would not run: it fails it with this message."""


def argo_pods(
    workflow: dict[str, Any], *, every_item: bool = False
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(DAG node, attempt, pod) for each pod a DAG task calls and attempt of ``ATTEMPTS``
    (of each item of a fan-out with ``every_item``, else of its first)."""
    for _, node, attempt, pod in template_pods(workflow, every_item=every_item):
        yield node, attempt, pod


def template_pods(
    workflow: dict[str, Any], *, every_item: bool = False
) -> Iterator[tuple[str, str, int, dict[str, Any]]]:
    """(template, DAG node, attempt, pod) for each pod a DAG task calls and attempt of
    ``ATTEMPTS`` (of each item of a fan-out with ``every_item``, else of its first)."""
    for node, template, inputs in calls(workflow, every_item=every_item):
        for attempt, last in ATTEMPTS.items():
            pod = argo_pod(workflow, node, template, inputs, attempt, last)
            yield template["name"], node, attempt, pod


def calls(
    workflow: dict[str, Any], *, every_item: bool = False
) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """(DAG node, template, input parameters) of each container template a DAG task calls,
    through nested DAGs from the entrypoint; a fan-out's first item (each one with
    ``every_item``). ``ArgoInvalid`` when a task calls a template that does not exist or does
    not supply a parameter."""
    spec = workflow.get("spec") or {}
    templates = {t.get("name"): t for t in spec.get("templates") or []}

    def dag(name: str, prefix: str) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
        for task in (templates[name].get("dag") or {}).get("tasks") or []:
            at = f"templates.{name}.tasks.{task['name']}"
            callee = templates.get(task["template"])
            if callee is None:
                raise ArgoInvalid(f"{at}: template {task['template']!r} not found")
            if "dag" in callee:
                yield from dag(task["template"], f"{prefix}{task['name']}.")
                continue
            if "container" not in callee:
                continue
            for index, item in enumerate(_items(task, every_item)):
                node = task["name"] + (f"({index}:{item})" if "withSequence" in task else "")
                arguments = {
                    p["name"]: str(p.get("value", "")).replace("{{item}}", item)
                    for p in (task.get("arguments") or {}).get("parameters") or []
                }
                yield prefix + node, callee, _inputs(callee, arguments, at)

    entrypoint = spec.get("entrypoint", "")
    if entrypoint not in templates:
        raise ArgoInvalid(f"spec.entrypoint: template {entrypoint!r} not found")
    yield from dag(entrypoint, "")


def _items(task: dict[str, Any], every_item: bool) -> list[str]:
    """The items of a DAG task: its ``withSequence``'s (``start`` to ``end``, or ``count``
    from ``start``), only the first unless ``every_item``; one item, "0", without one."""
    sequence = task.get("withSequence") or {}
    start = int(sequence.get("start", "0"))
    if not every_item or not sequence:
        return [str(start)]
    end = int(sequence["end"]) if "end" in sequence else start + int(sequence["count"]) - 1
    return [str(i) for i in range(start, end + 1)]


def node_pod(
    workflow: dict[str, Any], node: str, last: Mapping[str, str] = FIRST, attempt: int = 0
) -> dict[str, Any]:
    """The pod of an attempt of a DAG node (``T``, ``T-w0``, ``T-extra(0:1)``: its name below
    the Workflow and its part), the attempt before it ended as ``last``."""
    for path, template, inputs in calls(workflow):
        if re.sub(r"^Part\d+\.", "", path) == node:
            return argo_pod(workflow, path, template, inputs, attempt, last)
    raise KeyError(node)


def main_container(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's ``main`` container."""
    [main] = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
    return main


def _inputs(template: Mapping[str, Any], arguments: Mapping[str, str], at: str) -> dict[str, str]:
    """A template's input parameters for a call: the argument, else the default; Argo's
    message when one is not supplied."""
    found = {}
    for declared in (template.get("inputs") or {}).get("parameters") or []:
        name = declared["name"]
        if name in arguments:
            found[name] = arguments[name]
        elif "default" in declared:
            found[name] = str(declared["default"])
        elif "value" in declared:
            found[name] = str(declared["value"])
        else:
            raise ArgoInvalid(f"{at}: inputs.parameters.{name} was not supplied")
    return found


def argo_pod(
    workflow: dict[str, Any],
    node_path: str,
    template: dict[str, Any],
    inputs: Mapping[str, str],
    attempt: int,
    last: Mapping[str, str],
) -> dict[str, Any]:
    """The pod of one attempt of a DAG node (``node_path``: below the Workflow, with its
    parts) that calls ``template`` with ``inputs``, the attempt before it ended as ``last``."""
    wf_meta, spec = workflow["metadata"], workflow.get("spec") or {}
    values = {f"inputs.parameters.{k}": v for k, v in inputs.items()}
    rendered = json.loads(_fill(json.dumps(template), {**values, "retries": str(attempt)}))
    if unresolved := re.search(r"\{\{(inputs\.parameters\.[\w-]+)\}\}", json.dumps(rendered)):
        raise ArgoInvalid(
            f"templates.{template['name']}: failed to resolve {{{{{unresolved[1]}}}}}"
        )
    node = f"{wf_meta['name']}.{node_path}({attempt})"
    main = {"name": "main", **rendered["container"]}
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
        pod_spec = strategic_merge(pod_spec, json.loads(substitute(patch, last, inputs)))
    for container in pod_spec["containers"]:
        if container["name"] == "main":
            if not container.get("command"):
                raise ArgoInvalid(
                    f"templates.{template['name']}: when using the emissary executor you must "
                    "either explicitly specify the command, or list the image's command in "
                    "the index"
                )
            container["command"] = [
                "/var/run/argo/argoexec",
                "emissary",
                "--",
                *container["command"],
            ]
            container["volumeMounts"] = [*(container.get("volumeMounts") or []), ARGO_MOUNT]
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


def _fill(text: str, values: Mapping[str, str]) -> str:
    """Replace Argo's ``{{name}}`` variables (not the ``{{=expression}}`` ones) in a template's
    JSON, each value escaped for the JSON string it lands in (Argo's ``strconv.Quote``)."""

    def value(match: re.Match[str]) -> str:
        found = values.get(match[1])
        return match[0] if found is None else json.dumps(found)[1:-1]

    return re.sub(r"\{\{([a-z][\w.-]*)\}\}", value, text)
