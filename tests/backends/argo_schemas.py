"""Validators of Argo Workflows: the full CRD with unknown fields refused, and Argo's JSON schema.

Loaded once per test session from the vendored copies in ``schemas/`` (see its README).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft4Validator, Draft202012Validator

SCHEMAS = Path(__file__).parent / "schemas"


def strict(schema: Any) -> Any:
    """Add ``additionalProperties: false`` wherever an object schema lists its properties and
    does not keep unknown fields, so a misspelt field is an error."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


CEL_LIMITS = frozenset({"maxItems", "maxLength", "x-kubernetes-validations"})
"""What Argo 4.0 added to its full CRD: CEL rules, and the sizes that bound their cost (200
templates, 200 DAG tasks, 500 parameters, 100 metrics, names of 128 characters; Argo's
4.0 release notes, "Added CRD validation rules", PR 15028). Argo 3.7's CRD has none."""


def without_cel_limits(schema: Any) -> Any:
    """A schema without ``CEL_LIMITS``: Argo 3.7's CRD from 4.x's."""
    if isinstance(schema, list):
        return [without_cel_limits(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: without_cel_limits(v) for k, v in schema.items() if k not in CEL_LIMITS}


@cache
def crd_validator(argo_major: int = 4) -> Draft4Validator:
    """The Workflow CRD's openAPIV3Schema of an Argo major version (3: 3.7's), strict."""
    crd = yaml.load((SCHEMAS / "argoproj.io_workflows.yaml").read_text(), Loader=yaml.CSafeLoader)
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]
    return Draft4Validator(strict(schema if argo_major >= 4 else without_cel_limits(schema)))


@cache
def schema_definitions() -> dict[str, Any]:
    """The ``definitions`` of Argo's JSON schema."""
    schema = json.loads((SCHEMAS / "argo-workflows.schema.json").read_text())
    definitions: dict[str, Any] = schema["definitions"]
    return definitions


@cache
def json_schema_validator(
    definition: str = "io.argoproj.workflow.v1alpha1.Workflow",
) -> Draft202012Validator:
    """Argo's JSON schema for one of its definitions, a Workflow unless named (IntOrString
    and Quantity are strings there)."""
    root = {"$ref": f"#/definitions/{definition}", "definitions": schema_definitions()}
    return Draft202012Validator(root)


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Every error of a Workflow against both schemas, with the path of the field."""
    errors = []
    for name, validator in (("crd", crd_validator()), ("json", json_schema_validator())):
        for error in validator.iter_errors(manifest):
            path = ".".join(str(p) for p in error.absolute_path)
            errors.append(f"{name}: {path}: {error.message}")
    return errors
