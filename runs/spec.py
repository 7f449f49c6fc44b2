"""The run specification: the document a user submits (YAML or JSON), parsed and validated.

Every problem is reported by the path of the field it is about (``tasks.sweep.settings.n``),
so a user sees what to fix; no document, however malformed, causes anything but a
``SpecError``. The shape is a contract (see docs/run-spec.md): fields may be added, not changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

import yaml
from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as PackageRequirement
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
)

from harness.tasktypes import TaskType

MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_TASKS = 500
MAX_WORKERS = 1000
MAX_CORES = 512
MAX_MEMORY_GB = 4096.0
MAX_UNITS = 10_000_000
MAX_SETTINGS_BYTES = 64 * 1024
MAX_COMMAND_ARGS = 1000
MAX_ARG_LENGTH = 10_000

TASK_ID = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
PORT = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
SNAPSHOT_ID = re.compile(r"^[0-9a-f]{64}$")
IMAGE_REF = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._\-/:@]{0,499}$")
# Node names a split task adds to the DAG besides its own id.
DERIVED_NODE = re.compile(r"^(?P<task>[a-z][a-z0-9-]*)-(w\d+|extra|merge)$")

STRICT = ConfigDict(extra="forbid", strict=True)


def _match(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


ImageRef = Annotated[StrictStr, _match(IMAGE_REF, "an image reference")]


def _requirement(value: str) -> str:
    try:
        PackageRequirement(value)
    except InvalidRequirement:
        raise ValueError(f"{value!r} is not a package requirement (PEP 508)") from None
    if len(value) > 200:
        raise ValueError("a package requirement has at most 200 characters")
    return value


Requirement = Annotated[StrictStr, AfterValidator(_requirement)]
SnapshotId = Annotated[
    StrictStr, _match(SNAPSHOT_ID, "a snapshot id (upload the tree first: simrun submit does)")
]


class SpecError(Exception):
    """A document that is no valid run specification; ``errors`` maps field paths to messages."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{p}: {' '.join(m)}" for p, m in self.errors.items()))


class MemorySpec(BaseModel):
    """Overrides of the planner, per pod of the task."""

    model_config = STRICT

    per_worker_gb: float | None = Field(default=None, gt=0, le=MAX_MEMORY_GB)
    base_gb: float | None = Field(default=None, ge=0, le=MAX_MEMORY_GB)
    gb: float | None = Field(default=None, gt=0, le=MAX_MEMORY_GB, description="total per pod")


Arg = Annotated[StrictStr, Field(max_length=MAX_ARG_LENGTH)]


class TaskSpec(BaseModel):
    """A node of the DAG: a typed task (split or plugin) or a command task."""

    model_config = STRICT

    type: StrictStr | None = Field(default=None, max_length=100)
    command: list[Arg] | None = Field(default=None, min_length=1, max_length=MAX_COMMAND_ARGS)
    settings: dict[StrictStr, Any] | None = None
    inputs: dict[StrictStr, StrictStr] = Field(default_factory=dict, max_length=100)
    workers: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    cores: int | None = Field(default=None, ge=1, le=MAX_CORES)
    memory: MemorySpec | None = None
    image: ImageRef | None = None

    @field_validator("inputs")
    @classmethod
    def _ports(cls, inputs: dict[str, str]) -> dict[str, str]:
        for port in inputs:
            if not PORT.match(port):
                raise ValueError(f"port {port!r} must match [a-z][a-z0-9_-]*, at most 40 chars")
        return inputs


class EnvironmentSpec(BaseModel):
    """What the image of the run must contain."""

    model_config = STRICT

    image: ImageRef | None = None
    packages: list[Requirement] = Field(default_factory=list, max_length=200)


class RunSpec(BaseModel):
    """A run: its tasks by id, its environment, its source snapshots."""

    model_config = STRICT

    name: StrictStr = Field(default="", max_length=200)
    tasks: dict[StrictStr, TaskSpec] = Field(min_length=1, max_length=MAX_TASKS)
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    sources: list[SnapshotId] = Field(default_factory=list, max_length=50)
    reserve_node: StrictBool = False
    commands: Literal["direct", "docker"] | None = None

    def dump(self) -> dict[str, Any]:
        """The JSON form kept in the record and in ``run.json``."""
        return self.model_dump(mode="json", exclude_none=True)


class _NoAliasLoader(yaml.SafeLoader):
    """A safe loader that refuses aliases, so a small document cannot expand into a huge one.

    Dates stay strings (``name: 2024-01-01`` is a name, not a date), as they would in JSON.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # unannotated in yaml-stubs
            raise yaml.MarkedYAMLError(
                None, None, "aliases (*name) are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)


def parse_document(text: str | bytes) -> Any:
    """Read a document as JSON, else YAML; a ``SpecError`` under ``spec`` when it is neither."""
    if isinstance(text, bytes):
        if len(text) > MAX_DOCUMENT_BYTES:
            raise SpecError({"spec": [f"the document is larger than {MAX_DOCUMENT_BYTES} bytes"]})
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError({"spec": ["the document is not UTF-8 text"]}) from None
    if len(text.encode("utf-8", errors="replace")) > MAX_DOCUMENT_BYTES:
        raise SpecError({"spec": [f"the document is larger than {MAX_DOCUMENT_BYTES} bytes"]})
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as error:
        raise SpecError({"spec": [f"not valid YAML or JSON: {error}".replace("\n", " ")]}) from None
    except (RecursionError, ValueError, TypeError, OverflowError) as error:
        raise SpecError({"spec": [f"not valid YAML or JSON: {error}"]}) from None
    try:
        # Only what JSON can say: a spec means the same whichever of the two it came as.
        return json.loads(json.dumps(data))
    except (TypeError, ValueError, RecursionError):
        raise SpecError(
            {"spec": ["the document holds values JSON cannot (binary, sets, complex keys)"]}
        ) from None


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    parts = [prefix] if prefix else []
    parts += [str(p) for p in loc]
    return ".".join(parts) or "spec"


def _collect(errors: dict[str, list[str]], error: ValidationError, prefix: str = "") -> None:
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        errors.setdefault(_path(prefix, item["loc"]), []).append(message)


def _cycle(tasks: Mapping[str, TaskSpec]) -> list[str] | None:
    """A cycle of the inputs as a list of task ids, None without one."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(task: str) -> list[str] | None:
        state[task] = 1
        stack.append(task)
        for source in tasks[task].inputs.values():
            if source not in tasks:
                continue
            if state.get(source) == 1:
                return stack[stack.index(source) :] + [source]
            if source not in state and (found := visit(source)):
                return found
        stack.pop()
        state[task] = 2
        return None

    for task in tasks:
        if task not in state and (found := visit(task)):
            return found
    return None


def _check_task(
    task_id: str, task: TaskSpec, ids: Collection[str], types: Mapping[str, TaskType]
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    at = f"tasks.{task_id}"
    if not TASK_ID.match(task_id):
        errors[at] = [
            "a task id must match [a-z][a-z0-9-]*, at most 40 characters "
            "(it names the pods of the task)"
        ]
    if (task.type is None) == (task.command is None):
        errors.setdefault(at, []).append(
            "give either type (a task type) or command (args), not both"
            if task.type is not None
            else "give a type (a task type) or a command (args)"
        )
    for port, source in task.inputs.items():
        if source not in ids:
            errors[f"{at}.inputs.{port}"] = [f"unknown task {source!r}"]
        elif source == task_id:
            errors[f"{at}.inputs.{port}"] = ["a task cannot read its own output"]
    if task.command is not None:
        if task.settings:
            errors[f"{at}.settings"] = ["a command task takes no settings"]
        if task.workers is not None and task.workers > 1:
            errors[f"{at}.workers"] = ["only a split task has several workers"]
    if task.type is None:
        return errors
    task_type = types.get(task.type)
    if task_type is None:
        errors[f"{at}.type"] = [
            f"unknown task type {task.type!r} (known: {', '.join(sorted(types))})"
        ]
        return errors
    if not task_type.splittable and task.workers is not None and task.workers > 1:
        errors[f"{at}.workers"] = [f"{task.type} is a plugin task type: it runs as one pod"]
    if len(json.dumps(task.settings or {})) > MAX_SETTINGS_BYTES:
        errors[f"{at}.settings"] = [f"the settings are larger than {MAX_SETTINGS_BYTES} bytes"]
        return errors
    if task_type.settings.model_config.get("extra") != "allow":
        known = set(task_type.settings.model_fields) | {
            f.alias for f in task_type.settings.model_fields.values() if f.alias
        }
        for key in task.settings or {}:
            if key not in known:
                errors[f"{at}.settings.{key}"] = [
                    f"unknown setting of {task.type} (known: {', '.join(sorted(known))})"
                ]
    try:
        settings = task_type.parse_settings(task.settings)
    except ValidationError as error:
        _collect(errors, error, f"{at}.settings")
        return errors
    if task_type.splittable and task_type.units is not None:
        try:
            units = task_type.units(settings)
        except Exception as error:  # the type's own code: report, never crash
            errors[f"{at}.settings"] = [f"the task type cannot count its units: {error}"]
            return errors
        if not isinstance(units, int) or not 1 <= units <= MAX_UNITS:
            errors[f"{at}.settings"] = [f"the settings give {units!r} units, not 1 to {MAX_UNITS}"]
    return errors


def validate_spec(data: Any, *, types: Mapping[str, TaskType]) -> RunSpec:
    """Validate a parsed document against the schema, the task types and the DAG rules."""
    if not isinstance(data, dict):
        raise SpecError({"spec": ["a run specification is a mapping with at least 'tasks'"]})
    errors: dict[str, list[str]] = {}
    spec: RunSpec | None = None
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as error:
        _collect(errors, error)
    except (RecursionError, ValueError, TypeError) as error:
        raise SpecError({"spec": [f"cannot be read: {error}"]}) from None
    # Every problem at once: the tasks that are well formed are checked further even when
    # another part of the document is not.
    tasks = spec.tasks if spec is not None else _well_formed_tasks(data.get("tasks"))
    ids = set(tasks) if spec is not None else set(_ids(data.get("tasks")))
    for task_id, task in tasks.items():
        for path, messages in _check_task(task_id, task, ids, types).items():
            errors.setdefault(path, []).extend(messages)
    for task_id in tasks:
        derived = DERIVED_NODE.match(task_id)
        if derived is None:
            continue
        owner = tasks.get(derived["task"])
        if (
            owner is not None
            and owner.type is not None
            and owner.type in types
            and types[owner.type].splittable
        ):
            errors.setdefault(f"tasks.{task_id}", []).append(
                f"the id collides with a pod of the split task {derived['task']!r}"
            )
    if not errors and (cycle := _cycle(tasks)):
        errors[f"tasks.{cycle[0]}.inputs"] = [f"the inputs form a cycle: {' -> '.join(cycle)}"]
    if errors or spec is None:
        raise SpecError(errors)
    return spec


def _ids(raw: Any) -> list[str]:
    return [key for key in raw if isinstance(key, str)] if isinstance(raw, dict) else []


def _well_formed_tasks(raw: Any) -> dict[str, TaskSpec]:
    """The tasks of a document that is not valid as a whole which are valid on their own."""
    found = {}
    for task_id in _ids(raw):
        try:
            found[task_id] = TaskSpec.model_validate(raw[task_id])
        except (ValidationError, RecursionError, ValueError, TypeError):
            continue
    return found


def parse_spec(text: str | bytes, *, types: Mapping[str, TaskType]) -> RunSpec:
    """Parse and validate a submitted document."""
    return validate_spec(parse_document(text), types=types)


def task_kind(
    task: TaskSpec, types: Mapping[str, TaskType]
) -> Literal["split", "plugin", "command"]:
    """Whether a validated task is a split, a plugin or a command task."""
    if task.type is None:
        return "command"
    return "split" if types[task.type].splittable else "plugin"
