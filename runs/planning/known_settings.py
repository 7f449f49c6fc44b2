"""Settings a type shipped in sources refuses, told from what was learned of it before.

What a type makes of settings is its own code's to say, in the venv of its sources (a worker's
work, ``runs.planning.learned_types``). Yet once a type was learned, the service keeps its
settings schema (``python -m harness.describe``) and its verdict on every settings it was
asked about: a submission with new settings need not be accepted only to fail in the worker
when the schema already says no. ``refusals`` gives, by the path of the field, what the kept
verdicts refused and what the schema's bounds refuse, in the words pydantic uses, so the 400
is the one the type itself gives.

Only bounds are read of the schema (``CHECKED``: numbers' limits, the length of lists and
text), never a type (pydantic converts ``"3"`` to 3), a pattern (no regular expression of
the sources' runs in a web request) nor a required field (one may be given by another name):
what they do not refuse is learned as before. A type whose own validators rewrite a value
before its bounds hold is the rare one this refuses too early.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from runs.planning.spec import RunSpec

CHECKED = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
)
WALKED = ("properties", "items", "prefixItems", "$ref", "allOf")
"""The keywords followed to reach the bounds of nested settings."""
MAX_PROBLEMS = 20

_Bounds = validators.create(
    meta_schema=Draft202012Validator.META_SCHEMA,
    validators={name: Draft202012Validator.VALIDATORS[name] for name in (*CHECKED, *WALKED)},
)


def refusals(spec: RunSpec, known: Mapping[str, Any], canonical: Any) -> dict[str, list[str]]:
    """The problems of the spec's tasks of a type ``known`` (a kept ``types.json``) knows,
    by the path of their field: the verdicts kept of their settings (``canonical`` keys them),
    else what the type's schema bounds refuse."""
    problems: dict[str, list[str]] = {}
    types = known.get("types") or {}
    for task_id, task in spec.tasks.items():
        if task.type is None or task.type not in types:
            continue
        settings = task.settings or {}
        prefix = f"tasks.{task_id}.settings"
        verdict = (known.get("settings") or {}).get(task.type, {}).get(canonical(settings))
        if verdict is not None:
            for error in verdict.get("errors", []):
                _add(problems, _path(prefix, error.get("loc", [])), str(error.get("msg", "")))
            continue
        schema = types[task.type].get("schema")
        if isinstance(schema, dict) and schema:
            for found in _Bounds(schema).iter_errors(settings):
                _add(problems, _path(prefix, found.absolute_path), _pydantic_words(found))
    return dict(list(problems.items())[:MAX_PROBLEMS])


def _add(problems: dict[str, list[str]], path: str, message: str) -> None:
    problems.setdefault(path, []).append(message)


def _path(prefix: str, loc: Any) -> str:
    return ".".join([prefix, *(str(part) for part in loc)])


def _pydantic_words(error: ValidationError) -> str:
    """A bound's refusal as pydantic says it of the same field."""
    bound = error.validator_value
    count = len(error.instance) if isinstance(error.instance, list | str) else 0
    plural = "" if bound == 1 else "s"
    words = {
        "minimum": f"Input should be greater than or equal to {bound}",
        "exclusiveMinimum": f"Input should be greater than {bound}",
        "maximum": f"Input should be less than or equal to {bound}",
        "exclusiveMaximum": f"Input should be less than {bound}",
        "multipleOf": f"Input should be a multiple of {bound}",
        "minItems": f"List should have at least {bound} item{plural} after validation, not {count}",
        "maxItems": f"List should have at most {bound} item{plural} after validation, not {count}",
        "minLength": f"String should have at least {bound} character{plural}",
        "maxLength": f"String should have at most {bound} character{plural}",
    }
    return words.get(str(error.validator), str(error.message))
