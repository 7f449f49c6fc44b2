"""What the Kubernetes API server refuses of an object, for the strict stand-in (``kube_api``).

The schema of a pinned Kubernetes version (``kubernetes-validate``'s strict copies, so an
unknown field is refused), Argo's full Workflow CRD (``argo_schemas``), Kueue's kinds
(``kueue_schemas``), and the rules the API server adds to any schema: DNS-1123 names, label
keys and values, quantities, unique container and volume names, mounts of known volumes,
requests within limits. Each refusal is a field and a sentence, as the API server words it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import kubernetes_validate
from kubernetes.utils import parse_quantity

from tests.backends.argo_schemas import crd_validator
from tests.backends.kueue_schemas import kueue_validator

KUBERNETES = "1.34"
"""The Kubernetes version whose OpenAPI schema the stand-in holds objects to."""
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
QUALIFIED_RULE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
CLUSTER_NAMED = frozenset({"Node", "Namespace", "ClusterQueue", "ResourceFlavor"})


@dataclass(frozen=True)
class Cause:
    """One thing the API server refuses: the field and why."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def refusals(obj: dict[str, Any], *, argo_major: int = 4) -> list[Cause]:
    """Every reason the API server would refuse an object ([] when it is admitted), a Workflow
    held to the CRD of the Argo major version installed."""
    causes = schema_causes(obj, argo_major=argo_major)
    causes += metadata_causes(obj.get("metadata") or {}, obj.get("kind", ""))
    if obj.get("kind") == "Pod":
        causes += pod_spec_causes(obj.get("spec") or {}, "spec")
    return causes


def schema_causes(obj: dict[str, Any], *, argo_major: int = 4) -> list[Cause]:
    """The errors of an object against the schema of its kind (Argo's of ``argo_major``)."""
    api_version = obj.get("apiVersion", "")
    if api_version == "argoproj.io/v1alpha1":
        validator = crd_validator(argo_major)
    elif api_version.startswith("kueue.x-k8s.io/"):
        validator = kueue_validator(obj.get("kind", ""), api_version.split("/")[1])
    elif obj.get("kind") == "Pod":
        return list(_pod_schema_causes(json.dumps(_shape(obj), sort_keys=True)))
    else:
        try:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as error:
            return [Cause(_path(error.absolute_path), error.message)]
        return []
    return [
        Cause(_path(error.absolute_path), error.message)
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    ]


@lru_cache(maxsize=1024)
def _pod_schema_causes(shape: str) -> tuple[Cause, ...]:
    """The errors of a Pod of this shape against Kubernetes' schema. The schema of a Pod holds
    it to its fields and their types, never to its strings' values (it has no ``enum`` nor
    ``pattern``: those checks are ``metadata_causes`` and ``pod_spec_causes``), so the pods of
    one shape (the many Argo makes of one template) are validated once."""
    try:
        kubernetes_validate.validate(json.loads(shape), KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as error:
        return (Cause(_path(error.absolute_path), error.message),)
    return ()


def _shape(value: Any) -> Any:
    """An object with every string but its ``apiVersion`` and ``kind`` made empty: its shape."""
    if isinstance(value, dict):
        return {
            k: v if k in ("apiVersion", "kind") and isinstance(v, str) else _shape(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return "" if isinstance(value, str) else value


def metadata_causes(meta: dict[str, Any], kind: str) -> list[Cause]:
    """A name, labels and annotations as ``ValidateObjectMeta`` checks them."""
    causes = []
    name = meta.get("name") or ""
    rule, pattern = (
        (LABEL_RULE, DNS_LABEL) if kind == "Namespace" else (SUBDOMAIN_RULE, DNS_SUBDOMAIN)
    )
    longest = 63 if kind == "Namespace" else 253
    if not name:
        causes.append(Cause("metadata.name", "Required value: name or generateName is required"))
    elif len(name) > longest or not pattern.match(name):
        causes.append(Cause("metadata.name", f'Invalid value: "{name}": {rule}'))
    for key, value in (meta.get("labels") or {}).items():
        causes += key_causes(key, "metadata.labels")
        causes += label_value_causes(str(value), "metadata.labels")
    for key in meta.get("annotations") or {}:
        causes += key_causes(key, "metadata.annotations")
    return causes


def key_causes(key: str, field: str) -> list[Cause]:
    """A label or annotation key: an optional DNS-1123 subdomain prefix, a name of 63 at most."""
    prefix, _, name = key.rpartition("/")
    causes = []
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        causes.append(Cause(field, f'Invalid value: "{key}": prefix part {SUBDOMAIN_RULE}'))
    if not name or len(name) > 63 or not QUALIFIED.match(name):
        why = "name part must be no more than 63 characters" if len(name) > 63 else QUALIFIED_RULE
        causes.append(Cause(field, f'Invalid value: "{key}": {why}'))
    return causes


def label_value_causes(value: str, field: str) -> list[Cause]:
    if len(value) > 63:
        return [Cause(field, f'Invalid value: "{value}": must be no more than 63 characters')]
    if value and not QUALIFIED.match(value):
        return [Cause(field, f'Invalid value: "{value}": {LABEL_VALUE_RULE}')]
    return []


def pod_spec_causes(spec: dict[str, Any], at: str) -> list[Cause]:
    """What ``ValidatePodSpec`` adds to the schema: names, mounts, quantities, env names."""
    causes = []
    if not spec.get("containers"):
        causes.append(Cause(f"{at}.containers", "Required value"))
    volumes = [v.get("name", "") for v in spec.get("volumes") or []]
    causes += _names(volumes, f"{at}.volumes")
    groups = [("initContainers", spec.get("initContainers") or [])]
    groups.append(("containers", spec.get("containers") or []))
    causes += _names([c.get("name", "") for _, cs in groups for c in cs], f"{at}.containers")
    for group, containers in groups:
        for index, container in enumerate(containers):
            where = f"{at}.{group}[{index}]"
            for mount in container.get("volumeMounts") or []:
                if mount.get("name") not in volumes:
                    causes.append(
                        Cause(f"{where}.volumeMounts.name", f'Not found: "{mount.get("name")}"')
                    )
            for env in container.get("env") or []:
                if not ENV_NAME.match(env.get("name", "")):
                    causes.append(Cause(f"{where}.env.name", f'Invalid value: "{env.get("name")}"'))
            causes += _resources(container.get("resources") or {}, f"{where}.resources")
    for index, volume in enumerate(spec.get("volumes") or []):
        limit = (volume.get("emptyDir") or {}).get("sizeLimit")
        if limit is not None and _quantity(limit) is None:
            causes.append(Cause(f"{at}.volumes[{index}].emptyDir.sizeLimit", "Invalid value"))
    return causes


def _names(names: list[str], field: str) -> list[Cause]:
    causes = []
    for name in names:
        if len(name) > 63 or not DNS_LABEL.match(name):
            causes.append(Cause(f"{field}.name", f'Invalid value: "{name}": {LABEL_RULE}'))
    for name in {n for n in names if names.count(n) > 1}:
        causes.append(Cause(f"{field}.name", f'Duplicate value: "{name}"'))
    return causes


def _resources(resources: dict[str, Any], at: str) -> list[Cause]:
    causes = []
    amounts: dict[str, dict[str, Decimal]] = {}
    for part in ("requests", "limits"):
        for resource, value in (resources.get(part) or {}).items():
            parsed = _quantity(value)
            if parsed is None:
                causes.append(
                    Cause(
                        f"{at}.{part}[{resource}]",
                        f'Invalid value: "{value}": quantities must match the regular '
                        "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                )
            else:
                amounts.setdefault(part, {})[resource] = parsed
    for resource, request in (amounts.get("requests") or {}).items():
        limit = (amounts.get("limits") or {}).get(resource)
        if limit is not None and request > limit:
            causes.append(
                Cause(
                    f"{at}.requests[{resource}]",
                    f'Invalid value: "{resources["requests"][resource]}": must be less '
                    f"than or equal to {resource} limit of {resources['limits'][resource]}",
                )
            )
    return causes


def _quantity(value: Any) -> Decimal | None:
    try:
        parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    except ValueError:
        return None
    return parsed


def _path(path: Any) -> str:
    return ".".join(str(p) for p in path) or "<root>"
