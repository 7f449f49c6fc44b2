"""The run specification's JSON Schema (from ``runs.planning.spec.RunSpec``) in OpenAPI 3.0's
dialect.

pydantic writes JSON Schema 2020-12: ``{"type": "null"}`` in an ``anyOf`` for an optional
field, numeric ``exclusiveMinimum``, ``const``. OpenAPI 3.0 says ``nullable``, boolean
exclusive bounds and ``enum``; this rewrites the one into the other, so the documented body
of ``POST /api/runs/`` is what the parser accepts and a fuzzer can generate from it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent

from runs.planning.spec import RunSpec

REF_TEMPLATE = "#/components/schemas/{model}"


def openapi30(schema: Any) -> Any:
    """A JSON Schema 2020-12 fragment rewritten for OpenAPI 3.0."""
    if isinstance(schema, list):
        return [openapi30(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: openapi30(value) for key, value in schema.items() if key != "title"}
    variants = out.get("anyOf")
    if isinstance(variants, list) and {"type": "null"} in variants:
        rest = [v for v in variants if v != {"type": "null"}]
        out.pop("anyOf")
        base = rest[0] if len(rest) == 1 else {"anyOf": rest}
        if "$ref" in base:
            base = {"allOf": [base]}
        out = {**base, **out, "nullable": True}
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):
            out[plain] = out[bound]
            out[bound] = True
    if "const" in out:
        out["enum"] = [out.pop("const")]
    return out


class RunSpecExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]  # drf-spectacular is unannotated
    """Describe ``RunSpec`` (the body of a submission) to drf-spectacular."""

    target_class = RunSpec
    priority = 1

    def get_name(self, auto_schema: Any, direction: Any) -> str:
        return "RunSpec"

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = RunSpec.model_json_schema(ref_template=REF_TEMPLATE, mode="validation")
        for name, definition in schema.pop("$defs", {}).items():
            auto_schema.registry.register_on_missing(
                ResolvedComponent(  # type: ignore[no-untyped-call]  # drf-spectacular is unannotated
                    name=name,
                    type=ResolvedComponent.SCHEMA,
                    object=name,
                    schema=openapi30(definition),
                )
            )
        result: dict[str, Any] = openapi30(schema)
        return result
