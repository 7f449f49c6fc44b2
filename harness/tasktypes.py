"""Task types: the API a simulation author writes against.

A task type is a name, a pydantic settings model and either the split functions (how many
units, a per-process setup, the computation of one unit, the merge) or a command (a plugin
type, run through ``simrun-exec``). Types are registered by entry points in the group
``simrun.task_types``; the examples that ship with simrun are always known. The service also
knows the types a run's sources ship (``TYPE_PROVIDERS``): by name only, as a ``ShippedType``
whose code runs in the pods, where the sources are installed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, ValidationError

from harness.errors import ConfigurationError

ENTRY_POINT_GROUP = "simrun.task_types"

BUILTIN_TYPES = {
    "squares": "harness.examples.squares:TASK_TYPE",
    "alloc": "harness.examples.alloc:TASK_TYPE",
    "ising": "harness.examples.ising:TASK_TYPE",
    "csv-stats": "harness.examples.csv_stats:TASK_TYPE",
    "sweep": "harness.sweep:TASK_TYPE",
}


def input_names(model: type[BaseModel]) -> set[str]:
    """The names a settings model takes as input: a field's alias where it has one (its own
    name too only when the model validates by name), else its name."""
    config = model.model_config
    by_name = bool(config.get("validate_by_name") or config.get("populate_by_name"))
    names: set[str] = set()
    for name, field in model.model_fields.items():
        aliases: set[str] = set()
        if isinstance(field.validation_alias, str):
            aliases.add(field.validation_alias)
        elif isinstance(field.validation_alias, AliasChoices):
            aliases |= {c for c in field.validation_alias.choices if isinstance(c, str)}
        elif field.alias:
            aliases.add(field.alias)
        names |= aliases
        if not aliases or by_name:
            names.add(name)
    return names


@dataclass(frozen=True)
class MergeContext:
    """What a merge gets besides the settings: the unit results and where to write."""

    results: Sequence[Any]
    """The result of every unit, in unit order."""
    out: Path
    """The output directory of the task (``out/``), created before the merge."""
    inputs: Mapping[str, Path]
    """The directories of the input ports, by port."""
    reused_from: Mapping[int, str] = dataclasses.field(default_factory=dict)
    """The units an earlier task computed (a resume), each with that task (``<run>/<task>``):
    the results table says so in its ``reused_from`` column."""


@dataclass(frozen=True)
class TaskType:
    """A kind of task: a split sweep (``units`` + ``compute`` + ``merge``) or a plugin command.

    The functions take the validated settings (an instance of ``settings``) first. ``setup``
    runs once in each pool process; what it returns is passed to every ``compute`` call of
    that process (load a table, build a lattice). ``compute`` returns the result of one unit,
    any picklable value. ``merge`` writes the outputs into ``MergeContext.out``. A split type
    may also say of a unit's result its row of the results table (``row``: a flat mapping, kept
    as each unit ends so that a run that never merges still shows the units it finished) and
    why it failed (``failure``: one line, the unit's parameters and its error; None when it did
    not), counted live into the task's ``units_failed``.
    """

    name: str
    settings: type[BaseModel]
    units: Callable[[Any], int] | None = None
    compute: Callable[[Any, Any, int], Any] | None = None
    merge: Callable[[Any, MergeContext], None] | None = None
    setup: Callable[[Any], Any] | None = None
    command: Callable[[Any], list[str]] | None = None
    row: Callable[[Any, int, Any], Mapping[str, Any]] | None = None
    failure: Callable[[Any, int, Any], str | None] | None = None
    base_gb: float = 0.25
    """Memory of a pod besides its pool processes, in GiB (the planner's default)."""
    per_worker_gb: float = 0.5
    """Memory of one pool process, in GiB (the planner's default)."""
    description: str = ""

    def __post_init__(self) -> None:
        split = (self.units, self.compute, self.merge)
        if self.command is not None and any(f is not None for f in split):
            raise TypeError(f"task type {self.name!r}: give the split functions or a command")
        if self.command is None and any(f is None for f in split):
            raise TypeError(f"task type {self.name!r}: a split type needs units, compute, merge")

    @property
    def splittable(self) -> bool:
        """Whether the type splits into units (else it is a plugin with a command)."""
        return self.command is None

    def parse_settings(self, raw: Mapping[str, Any] | None) -> BaseModel:
        """Validate raw settings; raises pydantic's ``ValidationError``."""
        return self.settings.model_validate(dict(raw or {}))

    def settings_or_error(self, raw: Mapping[str, Any] | None) -> BaseModel:
        """Validate raw settings; a ``ConfigurationError`` naming the bad fields otherwise."""
        try:
            return self.parse_settings(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(settings)'}: {e['msg']}"
                for e in error.errors()
            )
            raise ConfigurationError(f"settings of task type {self.name!r}: {problems}") from None


def _load(name: str, target: str) -> TaskType:
    """The type an entry point names; a ``ConfigurationError`` with the fix when its module
    imports a package this environment lacks (the error a user meets first with their own)."""
    module, _, attribute = target.partition(":")
    try:
        imported = import_module(module)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if not missing or module == missing or module.startswith(f"{missing}."):
            raise  # the module of the entry point itself is not there
        raise ConfigurationError(
            f"task type {name!r}: its module {module} imports {missing!r}, which is not "
            f"installed here: install it in `environment.packages`, or import it inside "
            f"`compute`"
        ) from None
    task_type = getattr(imported, attribute)
    if not isinstance(task_type, TaskType):
        raise TypeError(f"{target} is not a TaskType")
    return task_type


@cache
def registered_types() -> dict[str, TaskType]:
    """The task types of this interpreter by name: the built-ins, then the entry points."""
    found = {name: _load(name, target) for name, target in BUILTIN_TYPES.items()}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in found:
            found[point.name] = _load(point.name, point.value)
    return found


class _AnySettings(BaseModel):
    """The settings of a ``ShippedType``: whatever the service validated at submission."""

    model_config = ConfigDict(extra="allow")


def runs_in_the_pods(*_: Any) -> Any:
    """The functions of a ``ShippedType``: its code is in the pods, never called here."""
    raise RuntimeError("a type the sources ship runs its code in the pods, not in the service")


PLUGIN_COMMAND = ["python", "-m", "harness.plugin"]
"""The command of a plugin type the sources ship: it runs the type's own command in the pod."""


@dataclass(frozen=True)
class ShippedType(TaskType):
    """A type some run's sources ship, as a backend sees it: a name, its code in the pods.

    The service validated the task's settings and counted its units at submission with the
    type the run's own sources define; a backend needs no more than the task's kind (from
    its record): a split task runs ``simrun-worker``, a plugin task ``PLUGIN_COMMAND``, which
    finds the type where the pod installed the sources. So the one stand-in serves both kinds,
    whichever run's sources ship a type of that name.
    """

    settings: type[BaseModel] = _AnySettings
    units: Callable[[Any], int] | None = runs_in_the_pods
    compute: Callable[[Any, Any, int], Any] | None = runs_in_the_pods
    merge: Callable[[Any, MergeContext], None] | None = runs_in_the_pods
    command: Callable[[Any], list[str]] | None = lambda _: list(PLUGIN_COMMAND)

    def __post_init__(self) -> None:
        """Both kinds at once, unlike an author's type (see the class)."""

    @property
    def splittable(self) -> bool:
        return True


TYPE_PROVIDERS: list[Callable[[], Mapping[str, TaskType]]] = []
"""Functions giving more types by name (the service's: the types runs' sources ship)."""


def task_types() -> dict[str, TaskType]:
    """Every known task type by name: the registered ones, then those of ``TYPE_PROVIDERS``."""
    found = dict(registered_types())
    for provider in TYPE_PROVIDERS:
        for name, task_type in provider().items():
            found.setdefault(name, task_type)
    return found


def get_task_type(name: str) -> TaskType:
    """The task type of a name; a ``ConfigurationError`` naming it when unknown."""
    types = task_types()
    if name not in types:
        known = ", ".join(sorted(types))
        raise ConfigurationError(f"unknown task type {name!r} (known: {known})")
    return types[name]
