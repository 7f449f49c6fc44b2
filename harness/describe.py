"""What the task types of this interpreter are, as JSON: how the service learns a run's own.

``python -m harness.describe`` runs in a venv where a run's sources are installed. It reads
``{"settings": {type: [settings, ...]}}`` on stdin and prints one JSON document: every type
(``types``: its kind, settings schema, fields, defaults, memory defaults, description) and, for
every settings asked about, what the type makes of them (``settings``: the validated settings
and their units, or the problems by field). So the service validates and plans a task of a
type it cannot import, without installing anything into its own environment.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from harness.errors import EXIT_CONFIGURATION, ConfigurationError
from harness.tasktypes import TaskType, input_names, task_types


def _jsonable(value: Any) -> Any:
    """A value as JSON can say it; its text where it cannot."""
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError:
        return repr(value)


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a settings model; empty where pydantic cannot give one."""
    try:
        return model.model_json_schema()
    except Exception:  # the author's model: a type without a schema is no reason to fail
        return {}


def describe_type(task_type: TaskType) -> dict[str, Any]:
    """What the service needs of a type: kind, settings fields, defaults, memory, description."""
    fields = task_type.settings.model_fields
    return {
        "kind": "split" if task_type.splittable else "plugin",
        "fields": sorted(input_names(task_type.settings)),
        "extra": task_type.settings.model_config.get("extra") or "ignore",
        "defaults": {
            (field.alias or name): _jsonable(field.get_default(call_default_factory=True))
            for name, field in fields.items()
            if not field.is_required()
        },
        "schema": _schema(task_type.settings),
        "base_gb": task_type.base_gb,
        "per_worker_gb": task_type.per_worker_gb,
        "description": task_type.description,
    }


def judge_settings(task_type: TaskType, raw: Any) -> dict[str, Any]:
    """What a type makes of settings: ``settings`` and ``units`` (or ``units_error``), else
    ``errors`` (``loc``, ``msg``, ``type`` of each problem)."""
    try:
        settings = task_type.parse_settings(raw if isinstance(raw, dict) else {})
    except ValidationError as error:
        problems = error.errors(include_url=False, include_context=False, include_input=False)
        return {
            "errors": [
                {"loc": [_jsonable(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
                for e in problems
            ]
        }
    found: dict[str, Any] = {"settings": _jsonable(settings.model_dump(mode="json"))}
    if task_type.splittable and task_type.units is not None:
        try:
            units = task_type.units(settings)
        except Exception as error:  # the type's own code: report, never crash
            found["units_error"] = str(error) or type(error).__name__
        else:
            found["units"] = units if isinstance(units, int) else repr(units)
    return found


def describe(asked: dict[str, list[Any]]) -> dict[str, Any]:
    """Every type of this interpreter and what the asked types make of the asked settings."""
    types = task_types()
    return {
        "types": {name: describe_type(t) for name, t in types.items()},
        "settings": {
            name: [judge_settings(types[name], raw) for raw in settings]
            for name, settings in asked.items()
            if name in types
        },
    }


def main() -> int:
    """Read the question on stdin, print the answer; 2 for a question that is no mapping, 4
    (and why on stderr) when a type cannot be loaded."""
    asked = json.load(sys.stdin)
    if not isinstance(asked, dict) or not isinstance(asked.get("settings", {}), dict):
        print('expected {"settings": {type: [settings, ...]}} on stdin', file=sys.stderr)
        return 2
    try:
        answer = describe(asked.get("settings", {}))
    except ConfigurationError as error:  # a type that cannot be loaded: the fix, no traceback
        print(error, file=sys.stderr)
        return EXIT_CONFIGURATION
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
