"""docker/k8s/'s ValidatingAdmissionPolicies, evaluated as the API server does, for the strict
stand-in (``kube_api``): a policy bound with ``Deny`` whose resource rule and match conditions
fit a request refuses it when one of its validations (CEL, by ``cel-python``) is false."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

import celpy


@dataclass(frozen=True)
class Policy:
    name: str
    binding: str
    spec: dict[str, Any]


def policies(documents: Iterable[dict[str, Any]]) -> list[Policy]:
    """The policies of ``documents`` with the binding that makes them deny."""
    documents = list(documents)
    specs = {
        d["metadata"]["name"]: d["spec"]
        for d in documents
        if d["kind"] == "ValidatingAdmissionPolicy"
    }
    return [
        Policy(spec["policyName"], d["metadata"]["name"], specs[spec["policyName"]])
        for d in documents
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
        and "Deny" in (spec := d["spec"]).get("validationActions", [])
        and spec["policyName"] in specs
    ]


def denials(
    found: list[Policy],
    *,
    resource: tuple[str, str, str],
    operation: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    username: str,
) -> list[str]:
    """The messages of every policy that denies a request: ``resource`` is (group, version,
    plural), ``operation`` CREATE or UPDATE."""
    group, version, plural = resource
    context = {
        "object": obj,
        "oldObject": old,
        "request": {"operation": operation, "userInfo": {"username": username}},
    }
    messages = []
    for policy in found:
        rules = policy.spec.get("matchConstraints", {}).get("resourceRules") or []
        if not any(
            group in rule["apiGroups"]
            and version in rule["apiVersions"]
            and plural in rule["resources"]
            and operation in rule["operations"]
            for rule in rules
        ):
            continue
        if not all(_true(c["expression"], context) for c in policy.spec.get("matchConditions", [])):
            continue
        variables: dict[str, Any] = {}
        for variable in policy.spec.get("variables") or []:
            variables[variable["name"]] = _value(
                variable["expression"], {**context, "variables": variables}
            )
        for validation in policy.spec.get("validations") or []:
            if not _true(validation["expression"], {**context, "variables": variables}):
                messages.append(
                    f"ValidatingAdmissionPolicy '{policy.name}' with binding '{policy.binding}' "
                    f"denied request: {validation.get('message', validation['expression'])}"
                )
    return messages


@cache
def _program(expression: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def _value(expression: str, context: dict[str, Any]) -> Any:
    """An expression's value; ``variables`` hold CEL values already, the rest is JSON."""
    activation = {
        key: (
            celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in value.items()})
            if key == "variables"
            else celpy.json_to_cel(value)
        )
        for key, value in context.items()
    }
    return _program(expression).evaluate(activation)


def _true(expression: str, context: dict[str, Any]) -> bool:
    return bool(_value(expression, context))
