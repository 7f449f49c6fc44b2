"""The run specification: the document a user submits, its models and limits, and the
validation of its parsed data.

Every problem is reported by the path of the field it is about (``tasks.sweep.settings.n``),
so a user sees what to fix; no document, however malformed, causes anything but a
``SpecError``. The shape is a contract (see docs/run-spec.md): fields may be added, not changed.
The text is read in ``spec_document``; the checks that need no model are in ``spec_checks``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

from django.conf import settings as django_settings
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

from harness.grid import RESERVED, parse_sweep
from harness.sweep import SWEEP_TYPE, Failures, ResultsFile, SweepSettings
from harness.tasktypes import TaskType, input_names
from runs.planning.relative_paths import relative_problem, relative_program
from runs.planning.spec_checks import (
    command_hint,
    input_cycle,
    known_type,
    non_finite_paths,
    sweep_problems,
    unknown,
    unswept_placeholders,
)

MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_TASKS = 500
MAX_WORKERS = 1000
MAX_CORES = 512
MAX_MEMORY_GB = 4096.0
MIN_MEMORY_GB = 0.001
"""About 1 MiB: a smaller memory size means nothing to a pod (Kubernetes would round it to 0)."""
MAX_UNITS = 10_000_000
MAX_SETTINGS_BYTES = 64 * 1024
MAX_COMMAND_ARGS = 1000
MAX_ARG_LENGTH = 10_000

TASK_ID = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")
"""A task id names its pods and is the value of their label ``simrun/task``: a Kubernetes
label value ends with a letter or digit (so ``sweep-`` is refused)."""
PORT = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""What a task type's name may be: a name, never a path (a learned one names a file)."""
TYPE_NAME_RULE = (
    "a task type's name is letters, digits, '_', '.' and '-', at most 100, "
    "starting with a letter or a digit"
)


def is_type_name(name: object) -> bool:
    """Whether ``name`` may name a task type (``TYPE_NAME``)."""
    return isinstance(name, str) and TYPE_NAME.fullmatch(name) is not None


SNAPSHOT_ID = re.compile(r"^[0-9a-f]{64}$")
IMAGE_REF = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._\-/:@]{0,499}$")
# Node names a split task adds to the DAG besides its own id.
DERIVED_NODE = re.compile(r"^(?P<task>[a-z][a-z0-9-]*)-(w\d+|extra|merge)$")

DOCUMENT_NAME = "the spec"
"""What a YAML error calls the submitted document (a file's name is the client's to say)."""

STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


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
    """A document that is no valid run specification; ``errors`` maps field paths to messages,
    ``line`` (from 1) is where the document stopped reading as YAML, if it did."""

    def __init__(self, errors: Mapping[str, list[str]], line: int | None = None) -> None:
        self.errors = dict(errors)
        self.line = line
        super().__init__("; ".join(f"{p}: {' '.join(m)}" for p, m in self.errors.items()))


def _memory_size(value: float) -> float:
    if value < MIN_MEMORY_GB:
        raise ValueError(f"must be at least {MIN_MEMORY_GB} (GiB)")
    return value


def _memory_size_or_zero(value: float) -> float:
    return value if value == 0 else _memory_size(value)


GiB = Annotated[float, Field(le=MAX_MEMORY_GB), AfterValidator(_memory_size)]
GiBOrZero = Annotated[float, Field(ge=0, le=MAX_MEMORY_GB), AfterValidator(_memory_size_or_zero)]


class MemorySpec(BaseModel):
    """Overrides of the planner, per pod of the task."""

    model_config = STRICT

    per_worker_gb: GiB | None = None
    base_gb: GiBOrZero | None = None
    gb: GiB | None = Field(default=None, description="total per pod")


Arg = Annotated[StrictStr, Field(max_length=MAX_ARG_LENGTH)]


class TaskSpec(BaseModel):
    """A node of the DAG: a typed task (split or plugin) or a command task; a command task
    with a ``sweep`` is a split task of the type ``sweep`` (``harness.sweep``)."""

    model_config = STRICT

    type: StrictStr | None = Field(default=None, max_length=100)
    command: list[Arg] | None = Field(default=None, min_length=1, max_length=MAX_COMMAND_ARGS)
    settings: dict[StrictStr, Any] | None = None
    inputs: dict[StrictStr, StrictStr] = Field(default_factory=dict, max_length=100)
    workers: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    cores: int | None = Field(default=None, ge=1, le=MAX_CORES)
    memory: MemorySpec | None = None
    image: ImageRef | None = None
    sweep: dict[StrictStr, Any] | None = Field(default=None, max_length=100)
    results: ResultsFile | None = None
    failures: Failures | None = None
    cache: StrictBool | None = None

    @field_validator("sweep")
    @classmethod
    def _axes_in_order(cls, sweep: dict[str, Any] | None) -> dict[str, Any] | None:
        """A sweep names the order of its axes (``axes``, as its normalised form does), so the
        spec kept in the record (jsonb reorders a mapping's keys) is read back with the units
        and columns in the order the user wrote."""
        if sweep is None or "axes" in sweep:
            return sweep
        return {"axes": [name for name in sweep if name not in RESERVED], **sweep}

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
    cache: StrictBool = False

    def dump(self) -> dict[str, Any]:
        """The JSON form kept in the record and in ``run.json``."""
        return self.model_dump(mode="json", exclude_none=True)


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    parts = [prefix] if prefix else []
    parts += [str(p) for p in loc]
    return ".".join(parts) or "spec"


def _fields(model: type[BaseModel]) -> set[str]:
    """The names a model accepts (``input_names``): a learned type's model names its fields
    ``field0``, … by their aliases, which no spec may use."""
    return input_names(model)


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that reads the mapping at ``loc`` of a document ``model`` reads, if any."""
    if model is RunSpec and loc[:1] == ("tasks",) and len(loc) >= 2:
        return _model_at(TaskSpec, loc[2:])
    if not loc or model is None:
        return model
    field = model.model_fields.get(str(loc[0]))
    if field is None:
        return None
    candidates = [field.annotation, *getattr(field.annotation, "__args__", ())]
    nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return _model_at(nested, loc[1:])


def _collect(
    errors: dict[str, list[str]],
    error: ValidationError,
    prefix: str = "",
    model: type[BaseModel] | None = None,
) -> None:
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        loc, path = item["loc"], _path(prefix, item["loc"])
        if item["type"] == "extra_forbidden":
            if path in errors:
                continue  # named as unknown already, with the known names
            parent = _model_at(model, loc[:-1])
            if parent is not None:
                message = unknown("field", str(loc[-1]), _fields(parent))
        elif loc[-1:] == ("command",) and isinstance(item.get("input"), str):
            message = command_hint(item["input"])
        errors.setdefault(path, []).append(message)


def _check_task(
    task_id: str,
    task: TaskSpec,
    ids: Collection[str],
    types: Mapping[str, TaskType],
    broken: Collection[str] = (),
    shipped: bool = False,
    max_sweep_units: int = MAX_UNITS,
) -> dict[str, list[str]]:
    """The problems of one task; ``broken`` names its fields already reported as malformed.

    With ``shipped`` an unknown type is left to the run's sources (``runs.planning.learned_types``).
    """
    errors: dict[str, list[str]] = {}
    at = f"tasks.{task_id}"
    if not TASK_ID.match(task_id):
        errors[at] = [
            "a task id must match [a-z]([a-z0-9-]*[a-z0-9])?, at most 40 characters: it "
            "starts with a letter and ends with a letter or digit (it names the pods of the "
            "task and is the value of their label simrun/task, which Kubernetes requires to "
            "end with an alphanumeric character)"
        ]
    if (task.type is None) == (task.command is None) and not {"type", "command"} & set(broken):
        errors.setdefault(at, []).append(
            "give either type (a task type) or command (args), not both"
            if task.type is not None
            else "give a type (a task type) or a command (args)"
        )
    for port, source in task.inputs.items():
        if source not in ids:
            errors[f"{at}.inputs.{port}"] = [unknown("task", source, set(ids) - {task_id})]
        elif source == task_id:
            errors[f"{at}.inputs.{port}"] = ["a task cannot read its own output"]
    if task.command is not None:
        if relative := relative_program(task.command):
            errors[f"{at}.command.{relative[0]}"] = [relative_problem(relative[1])]
        if task.settings:
            errors[f"{at}.settings"] = ["a command task takes no settings"]
        if task.workers is not None and task.workers > 1 and task.sweep is None:
            errors[f"{at}.workers"] = [
                "only a split task (or a command with a sweep) has several workers"
            ]
    if task.sweep is not None or "sweep" in broken:
        errors.update(sweep_problems(task_id, task, max_sweep_units, broken))
    else:
        errors.update(unswept_placeholders(task_id, task))
        for name in ("results", "failures"):
            if getattr(task, name) is not None:
                errors[f"{at}.{name}"] = [f"only a command with a sweep takes {name}"]
    if task.type is None:
        return errors
    if not is_type_name(task.type):
        errors[f"{at}.type"] = [f"{task.type[:100]!r} is no name: {TYPE_NAME_RULE}"]
        return errors
    if task.type == SWEEP_TYPE:
        errors[f"{at}.type"] = [
            f"{SWEEP_TYPE!r} is the type simrun gives a command with a sweep: "
            "write command: [...] and sweep: {...} instead"
        ]
        return errors
    task_type = known_type(types, task.type)
    if task_type is None:
        if not shipped:
            offered = [name for name in types if known_type(types, name) and name != SWEEP_TYPE]
            errors[f"{at}.type"] = [unknown("task type", task.type, offered)]
        return errors
    if not task_type.splittable and task.workers is not None and task.workers > 1:
        errors[f"{at}.workers"] = [f"{task.type} is a plugin task type: it runs as one pod"]
    if len(json.dumps(task.settings or {})) > MAX_SETTINGS_BYTES:
        errors[f"{at}.settings"] = [f"the settings are larger than {MAX_SETTINGS_BYTES} bytes"]
        return errors
    if task_type.settings.model_config.get("extra") != "allow":
        known = _fields(task_type.settings)
        for key in task.settings or {}:
            if key not in known:
                errors[f"{at}.settings.{key}"] = [unknown(f"setting of {task.type}", key, known)]
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


def validate_spec(
    data: Any,
    *,
    types: Mapping[str, TaskType],
    sources_learned: bool = False,
    max_sweep_units: int | None = None,
) -> RunSpec:
    """Validate a parsed document against the schema, the task types and the DAG rules.

    Every problem at once: the schema's, then each task's (a malformed task is checked with
    its well-formed fields), the name collisions and a cycle of the inputs. A type ``types``
    lacks is left to the spec's ``sources`` when it has some, unless ``sources_learned`` (the
    types they ship are among ``types``): the submission learns and checks it. A sweep makes
    at most ``max_sweep_units`` units (the setting ``SIMRUN_SWEEP_MAX_UNITS`` by default).
    """
    cap = django_settings.SIMRUN_SWEEP_MAX_UNITS if max_sweep_units is None else max_sweep_units
    if not isinstance(data, dict):
        raise SpecError({"spec": ["a run specification is a mapping with at least 'tasks'"]})
    errors: dict[str, list[str]] = {}
    spec: RunSpec | None = None
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as error:
        _collect(errors, error, model=RunSpec)
    except (RecursionError, ValueError, TypeError) as error:
        raise SpecError({"spec": [f"cannot be read: {error}"]}) from None
    broken: dict[str, set[str]] = {}
    if spec is not None:
        tasks = dict(spec.tasks)
    else:
        tasks, broken = _well_formed_tasks(data.get("tasks"))
    ids = set(tasks) if spec is not None else set(_ids(data.get("tasks")))
    sources = spec.sources if spec is not None else data.get("sources")
    shipped = bool(sources) and not sources_learned
    for task_id, task in tasks.items():
        found = _check_task(task_id, task, ids, types, broken.get(task_id, set()), shipped, cap)
        for path, messages in found.items():
            errors.setdefault(path, []).extend(messages)
    for path, message in _collisions(tasks, types):
        errors.setdefault(path, []).append(message)
    try:
        for path in non_finite_paths(data):
            if not any("finite" in message for message in errors.get(path, [])):
                errors.setdefault(path, []).append("must be a finite number")
    except RecursionError:
        raise SpecError({"spec": ["cannot be read: nested too deeply"]}) from None
    if cycle := input_cycle(tasks):
        errors.setdefault(f"tasks.{cycle[0]}.inputs", []).append(
            f"the inputs form a cycle: {' -> '.join(cycle)}"
        )
    if errors or spec is None:
        raise SpecError(errors)
    return spec


def _collisions(
    tasks: Mapping[str, TaskSpec], types: Mapping[str, TaskType]
) -> list[tuple[str, str]]:
    """Task ids that name a pod a split task adds to the DAG (``<task>-w1``, ``-merge``)."""
    found = []
    for task_id in tasks:
        derived = DERIVED_NODE.match(task_id)
        owner = tasks.get(derived["task"]) if derived else None
        name = type_name(owner) if owner else None
        kind = known_type(types, name) if name else None
        if derived and kind is not None and kind.splittable:
            found.append(
                (
                    f"tasks.{task_id}",
                    f"the id collides with a pod of the split task {derived['task']!r}",
                )
            )
    return found


def _ids(raw: Any) -> list[str]:
    return [key for key in raw if isinstance(key, str)] if isinstance(raw, dict) else []


def _well_formed_tasks(raw: Any) -> tuple[dict[str, TaskSpec], dict[str, set[str]]]:
    """The tasks of a document that is not valid as a whole, each without its malformed fields.

    A task with ``workers: "four"`` is still checked for its settings; the fields left out
    (reported by the schema already) are returned by task id.
    """
    found: dict[str, TaskSpec] = {}
    broken: dict[str, set[str]] = {}
    for task_id in _ids(raw):
        fields = raw[task_id]
        if not isinstance(fields, dict):
            continue
        left_out: set[str] = set()
        for _ in range(len(fields) + 1):
            try:
                found[task_id] = TaskSpec.model_validate(
                    {k: v for k, v in fields.items() if k not in left_out}
                )
            except ValidationError as error:
                bad = {str(e["loc"][0]) for e in error.errors() if e["loc"]} - left_out
                if not bad:
                    break
                left_out |= bad
            except (RecursionError, ValueError, TypeError):
                break
            else:
                broken[task_id] = left_out
                break
    return found, broken


def cached_tasks(spec: RunSpec) -> set[str]:
    """The tasks that take the work of the newest same task of their owner's runs: their own
    ``cache``, else the run's (docs/resume.md)."""
    return {
        task_id
        for task_id, task in spec.tasks.items()
        if (task.cache if task.cache is not None else spec.cache)
    }


def type_name(task: TaskSpec) -> str | None:
    """The task type a task runs as: its own, ``sweep`` for a command with a sweep, else None."""
    return SWEEP_TYPE if task.sweep is not None else task.type


def task_kind(
    task: TaskSpec, types: Mapping[str, TaskType]
) -> Literal["split", "plugin", "command"]:
    """Whether a validated task is a split, a plugin or a command task."""
    name = type_name(task)
    if name is None:
        return "command"
    return "split" if types[name].splittable else "plugin"


def sweep_settings(task: TaskSpec) -> dict[str, Any]:
    """The settings of a validated command sweep as it is stored and run: the normalised
    form of its sweep (``harness.grid.Grid.as_json``), deterministic and JSON."""
    assert task.command is not None and task.sweep is not None
    settings = SweepSettings(
        command=task.command,
        sweep=parse_sweep(task.sweep).as_json(),
        ports=sorted(task.inputs),
        results=task.results,
        failures=task.failures or Failures(),
    )
    return settings.model_dump(mode="json")
