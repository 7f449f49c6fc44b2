"""The task types a run's sources ship, learned from its snapshots without installing them here.

A spec may name a type that only its ``sources`` define. At submission the service installs
the snapshots into a venv of their own (on the service's packages, as a run has them), asks
the harness there what its types are and what they make of the
spec's settings (``python -m harness.describe``), and validates and plans with what it was
told: a ``LearnedType`` per type. What it learned is kept under
``<store>/learned-types/<key>/`` (``types.json``, beside the venv), the key being the digests
of the snapshots, which never change: a later submission of the same sources and settings
costs no build and no process, new settings one process in the kept venv.

Learning runs the code of the sources (their build and import), so it runs as a task would:
without the service's environment, as the owner's task user where tasks run as their owners'
(``runs.backends.sources``), kept per owner; off where ``SIMRUN_LEARN_SOURCES`` is (Argo by
default, whose service pod holds its secrets).

The backends know such a type by its name only (``harness.tasktypes.ShippedType``, from
``stand_ins``): its code runs in the pods, which install the sources.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import io
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticCustomError

from harness.tasktypes import (
    PLUGIN_COMMAND,
    TYPE_PROVIDERS,
    ShippedType,
    TaskType,
    registered_types,
    runs_in_the_pods,
)
from runs.backends import sources
from runs.common import store
from runs.planning.known_settings import refusals
from runs.planning.spec import (
    TYPE_NAME_RULE,
    RunSpec,
    SpecError,
    is_type_name,
    validate_spec,
)

log = logging.getLogger(__name__)

TAIL_LINES = 15
"""The lines of a failed install's or description's output a 400 quotes."""
TYPES_FILE = "types.json"


class LearnError(Exception):
    """The types of a run's sources cannot be learned; the message says why, with the output."""


class MustLearn(Exception):
    """Learning the types a run's sources ship runs their code: it is the worker's to do
    (``runs.control.learning``), never a web request's."""


def canonical(settings: Mapping[str, Any] | None) -> str:
    """The settings as one text, the key of what a type made of them."""
    return json.dumps(dict(settings or {}), sort_keys=True, separators=(",", ":"))


def learned_dir(
    digests: list[str], owner_id: int | None = None, packages: Sequence[str] = ()
) -> Path:
    """Where what the snapshots ``digests`` of an owner ship, on the environment's
    ``packages``, is kept: their venv (the owner's task user's) and ``types.json``."""
    named = f"{owner_id}:{','.join(digests)}"
    if packages:
        named += ":" + ",".join(sorted(set(packages)))
    key = hashlib.sha256(named.encode()).hexdigest()[:32]
    return store.root() / "learned-types" / key


LEARNING_OFF = (
    "this service does not run the code of a run's sources to learn their task types "
    "(SIMRUN_LEARN_SOURCES is off): install the package of the types into the "
    "service's image, or ask an operator to turn it on"
)


def names_dir() -> Path:
    """A file per type name any sources shipped: the names ``stand_ins`` gives the backends."""
    return store.root() / "learned-types" / "names"


class _Settings(BaseModel):
    """Settings a ``LearnedType`` validated: the values its type gave, as they are."""

    model_config = ConfigDict(extra="allow")


def _shape(name: str, info: Mapping[str, Any]) -> type[BaseModel]:
    """A model with the fields of a learned type's settings (by alias) and its ``extra``.

    It answers what the spec's validation asks of a settings model (the names it accepts);
    the values are validated by the type itself, in the venv of the sources.
    """
    fields: dict[str, Any] = {
        f"field{i}": (Any, Field(default=None, alias=field_name))
        for i, field_name in enumerate(info.get("fields", []))
    }
    extra: Literal["allow", "forbid", "ignore"] = "ignore"
    if info.get("extra") in {"allow", "forbid"}:
        extra = info["extra"]
    return create_model(f"{name} settings", __config__=ConfigDict(extra=extra), **fields)


def _units(outcomes: Mapping[str, Mapping[str, Any]], settings: BaseModel) -> int:
    """The units the type counted for settings it validated."""
    outcome = outcomes[canonical(settings.model_dump(mode="json"))]
    if "units_error" in outcome:
        raise ValueError(outcome["units_error"])
    units = outcome.get("units")
    return units if isinstance(units, int) else 0


@dataclass(frozen=True)
class LearnedType(TaskType):
    """A task type the run's sources ship, as the service learned it from them.

    Its settings are judged by the type itself, in the venv of the sources: ``outcomes``
    holds what it made of each settings the spec gives (by ``canonical``), and of the
    validated settings themselves.
    """

    outcomes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def parse_settings(self, raw: Mapping[str, Any] | None) -> BaseModel:
        """The settings as the type validated them; its ``ValidationError`` otherwise."""
        outcome = self.outcomes.get(canonical(raw))
        if outcome is None:
            raise KeyError(f"task type {self.name!r} was not asked about {canonical(raw)}")
        if "errors" in outcome:
            raise ValidationError.from_exception_data(
                self.name,
                [
                    {
                        "type": PydanticCustomError(str(e["type"]), str(e["msg"])),
                        "loc": tuple(e["loc"]),
                        "input": None,
                    }
                    for e in outcome["errors"]
                ],
            )
        return _Settings.model_validate(outcome["settings"])


def learned_type(name: str, info: Mapping[str, Any], judged: Mapping[str, Any]) -> LearnedType:
    """The type ``name`` of a ``types.json``: ``info`` from its types, ``judged`` its settings."""
    outcomes = dict(judged)
    for outcome in judged.values():
        if "settings" in outcome:  # the validated settings validate as themselves
            outcomes.setdefault(canonical(outcome["settings"]), outcome)
    split = info.get("kind") == "split"
    return LearnedType(
        name=name,
        settings=_shape(name, info),
        units=functools.partial(_units, outcomes) if split else None,
        compute=runs_in_the_pods if split else None,
        merge=runs_in_the_pods if split else None,
        command=None if split else lambda _: list(PLUGIN_COMMAND),
        base_gb=float(info.get("base_gb", TaskType.base_gb)),
        per_worker_gb=float(info.get("per_worker_gb", TaskType.per_worker_gb)),
        description=str(info.get("description", "")),
        outcomes=outcomes,
    )


def _describe(
    learning: sources.Learning,
    asked: Mapping[str, list[Any]],
    packages: Sequence[str],
    snapshots: list[Path],
) -> dict[str, Any]:
    """Install the snapshots and ask the harness in their venv what their types make of
    ``asked`` (``runs.backends.sources``); ``LearnError`` with the output if it fails."""
    try:
        done = sources.describe(
            learning, snapshots, packages, asked, stdin=json.dumps({"settings": asked})
        )
    except sources.SourcesError as error:
        raise LearnError(str(error)) from None
    if done.returncode is None:
        raise LearnError(
            f"the types of the sources did not answer within {learning.describe_timeout_s:g} s "
            f"(python -m harness.describe, SIMRUN_LEARN_DESCRIBE_S): {sources.tail(done.stderr)}"
        )
    if done.returncode != 0:
        raise LearnError(
            f"the types of the sources cannot be loaded (python -m harness.describe exited "
            f"{done.returncode}):\n{sources.tail(done.stderr)}"
        )
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        raise LearnError(
            f"python -m harness.describe printed no JSON: {sources.tail(done.stdout)}"
        ) from None
    if not isinstance(answer, dict):
        raise LearnError("python -m harness.describe printed no JSON object")
    if bad := [name for name in answer.get("types") or {} if not is_type_name(name)]:
        raise LearnError(
            f"the sources ship a task type named {bad[0][:100]!r}, which is no name: "
            f"{TYPE_NAME_RULE}"
        )
    return answer


def _learning(home: Path, owner_id: int | None) -> sources.Learning:
    """Where and as whom the sources of ``owner_id`` are learned, by the settings;
    ``LearnError`` where this service does not run them (``SIMRUN_LEARN_SOURCES``)."""
    if not settings.SIMRUN_LEARN_SOURCES:
        raise LearnError(LEARNING_OFF)
    return sources.Learning(
        home=home,
        store=store.root(),
        owner_id=owner_id,
        task_uid_base=settings.SIMRUN_TASK_UID_BASE,
        install_timeout_s=settings.SIMRUN_LEARN_INSTALL_S,
        describe_timeout_s=settings.SIMRUN_LEARN_DESCRIBE_S,
        packages_timeout_s=settings.SIMRUN_PACKAGES_TIMEOUT_S,
        environments_kept=settings.SIMRUN_ENVIRONMENTS_KEPT,
        packages_cache_gb=settings.SIMRUN_PACKAGES_CACHE_GB,
        memory_gb=settings.SIMRUN_BUILD_MEMORY_GB,
        pids_max=settings.SIMRUN_BUILD_PIDS_MAX,
        disk_gb=settings.SIMRUN_BUILD_DISK_GB,
        files_max=settings.SIMRUN_BUILD_FILES_MAX,
        # The local backend's folders of users' things: its store, scratch and runs' venvs.
        fenced=tuple(
            str(root)
            for root in (
                store.root(),
                settings.SIMRUN_SCRATCH,
                settings.SIMRUN_SCRATCH.parent / "envs",
            )
        ),
    )


def kept(
    digests: list[str],
    asked: Mapping[str, list[Any]],
    owner_id: int | None = None,
    packages: Sequence[str] = (),
) -> dict[str, Any] | None:
    """What is kept of the snapshots ``digests`` on ``packages`` (``learn``'s answer) if it
    answers every settings of ``asked``, None if learning must run their code."""
    known = kept_types(digests, owner_id, packages)
    return known if known is not None and not _missing(known, asked) else None


def kept_types(
    digests: list[str], owner_id: int | None = None, packages: Sequence[str] = ()
) -> dict[str, Any] | None:
    """What is kept of the snapshots ``digests`` on ``packages``, however much it answers;
    None when nothing is."""
    path = learned_dir(digests, owner_id, packages) / TYPES_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return known if isinstance(known, dict) else None


def _missing(known: Mapping[str, Any], asked: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """The settings of ``asked`` that ``known`` (a ``types.json``) has no judgement of."""
    if not known:
        return {name: list(settings) for name, settings in asked.items() if settings}
    judged = known.get("settings", {})
    missing = {
        name: [raw for raw in settings if canonical(raw) not in judged.get(name, {})]
        for name, settings in asked.items()
        if name in known.get("types", {})
    }
    return {name: settings for name, settings in missing.items() if settings}


def learn(
    digests: list[str],
    asked: Mapping[str, list[Any]],
    owner_id: int | None = None,
    packages: Sequence[str] = (),
) -> dict[str, Any]:
    """What the snapshots ``digests`` ship, on the environment's ``packages``: their types and
    what those made of ``asked`` (settings by type name); built, described and kept only as
    far as it is not kept yet. Their code runs as ``runs.backends.sources`` says, never as the
    service with its environment; the packages are the venv a run of the environment runs in.

    The install may take ``SIMRUN_LEARN_INSTALL_S``, the description
    ``SIMRUN_LEARN_DESCRIBE_S``: both are stopped then. One process at a time learns the same
    snapshots (a file lock). ``LearnError`` when the snapshots cannot be installed or their
    types cannot be described, or a name they ship is no name (``is_type_name``);
    ``PackagesError`` when the packages cannot be installed.
    """
    home = learned_dir(digests, owner_id, packages)
    home.mkdir(parents=True, exist_ok=True)
    with open(home.with_name(home.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = home / TYPES_FILE
        known: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        judged = known.get("settings", {})
        missing = _missing(known, asked)
        if known and not missing:
            return known
        log.info("learning the task types of the sources %s", ", ".join(d[:12] for d in digests))
        said = io.StringIO()  # the install's lines are for a run's log: here, the service's
        try:
            with contextlib.redirect_stdout(said):
                answer = _describe(
                    _learning(home, owner_id),
                    missing,
                    packages,
                    [store.snapshot_dir(d) for d in digests],
                )
        finally:
            if said.getvalue().strip():
                log.info("%s", sources.tail(said.getvalue()))
        for name, outcomes in answer.get("settings", {}).items():
            by_key = judged.setdefault(name, {})
            for raw, outcome in zip(missing.get(name, []), outcomes, strict=False):
                by_key[canonical(raw)] = outcome
        known = {"types": answer.get("types", {}), "settings": judged}
        store.write_json(path, known)
    own = registered_types()
    note_names([name for name in known["types"] if name not in own])
    return known


def note_names(names: list[str]) -> None:
    """A file in ``names_dir`` per name (checked as a name, made relative to the folder's
    descriptor without following a link): the names ``stand_ins`` gives the backends."""
    names_dir().mkdir(parents=True, exist_ok=True)
    folder = os.open(names_dir(), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in names:
            if not is_type_name(name):
                raise LearnError(f"{name[:100]!r} is no task type name")
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            os.close(os.open(name, flags, 0o644, dir_fd=folder))
    finally:
        os.close(folder)


def shipped(spec: RunSpec, types: Mapping[str, TaskType]) -> dict[str, list[Any]]:
    """The settings of the spec's tasks whose type is none of ``types``, by type: those only
    its sources may define."""
    asked: dict[str, list[Any]] = {}
    for task in spec.tasks.values():
        if task.type is not None and task.type not in types:
            asked.setdefault(task.type, []).append(task.settings or {})
    return asked


def run_types(
    spec: RunSpec, owner_id: int | None = None, *, run_code: bool = True
) -> tuple[RunSpec, dict[str, TaskType]]:
    """The types a run is validated and planned with, and its spec validated with them.

    Without a type its sources must define, the service's own (``registered_types``: not the
    ``ShippedType`` stand-ins, which are the backends') and the spec as it is. Else the types
    the sources ship join them (``learn``) and the spec is validated again, now
    with them: a ``SpecError`` under ``sources`` when they cannot be learned. Without
    ``run_code``, only what is kept is used: ``MustLearn`` when their code must run, unless
    what is kept of a type already refuses its settings (``known_settings.refusals``), a
    ``SpecError`` by field.
    """
    types = dict(registered_types())
    asked = shipped(spec, types)
    if not spec.sources or not asked:
        return spec, types
    packages = spec.environment.packages
    try:
        known = kept(list(spec.sources), asked, owner_id, packages)
        if known is None and not settings.SIMRUN_LEARN_SOURCES:
            raise LearnError(LEARNING_OFF)
        if known is None and not run_code:
            partly = kept_types(list(spec.sources), owner_id, packages)
            if partly and (problems := refusals(spec, partly, canonical)):
                raise SpecError(problems)  # what the type already said: no need to learn
            raise MustLearn
        known = known or learn(list(spec.sources), asked, owner_id, packages)
    except LearnError as error:
        raise SpecError({"sources": [str(error)]}) from None
    except sources.PackagesError as error:
        raise SpecError({"environment.packages": [str(error)]}) from None
    own = registered_types()
    learned = {
        name: learned_type(name, info, known["settings"].get(name, {}))
        for name, info in known["types"].items()
        if name not in own and is_type_name(name)
    }
    types = {**types, **learned}
    return validate_spec(spec.dump(), types=types, sources_learned=True), types


def stand_ins() -> dict[str, TaskType]:
    """A ``ShippedType`` for every type name some run's sources shipped (the backends')."""
    directory = names_dir()
    names = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    names = [name for name in names if is_type_name(name)]
    return {name: ShippedType(name=name) for name in names}


def register() -> None:
    """Make ``task_types`` give the types runs' sources ship (``stand_ins``), once."""
    if stand_ins not in TYPE_PROVIDERS:
        TYPE_PROVIDERS.append(stand_ins)
