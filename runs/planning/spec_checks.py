"""Checks of a run specification that need none of its models: unknown names with the
closest known one, a command given as one string, a cycle of the inputs, a command sweep's
axes and placeholders, numbers that are not finite.

``runs.planning.spec.validate_spec`` gathers their problems by the path of the field each is
about.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from harness.grid import RESERVED, SweepError, parse_sweep
from harness.placeholders import PlaceholderError, names, parse
from harness.tasktypes import ShippedType, TaskType

if TYPE_CHECKING:
    from runs.planning.spec import TaskSpec


def unknown(what: str, name: str, known: Collection[str]) -> str:
    """The message for an unknown name: the known ones and the closest of them, if any is close."""
    message = f"unknown {what} {name!r} (known: {', '.join(sorted(known)) or 'none'})"
    closest = difflib.get_close_matches(name, list(known), n=1)
    return f"{message}; did you mean {closest[0]!r}?" if closest else message


def command_hint(line: str) -> str:
    """What a command given as one string must be instead: its arguments as a list (no shell
    reads it), or a shell's list when it needs one."""
    try:
        words = shlex.split(line)
    except ValueError:  # an unclosed quote: the words as they stand
        words = line.split()
    listed = json.dumps(words) if words else '["echo", "hello"]'
    return (
        f"a command is a list of arguments, not a string (no shell splits it): "
        f"command: {listed}, or command: {json.dumps(['sh', '-c', line])} for a shell"
    )


def input_cycle(tasks: Mapping[str, TaskSpec]) -> list[str] | None:
    """A cycle of the inputs as a list of task ids, None without one."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(task: str) -> list[str] | None:
        state[task] = 1
        stack.append(task)
        for source in tasks[task].inputs.values():
            if source not in tasks or source == task:
                continue  # reported as an unknown task or as a task reading its own output
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


def known_type(types: Mapping[str, TaskType], name: str) -> TaskType | None:
    """The type of a name the spec may use as it is: a ``ShippedType`` is a name some run's
    sources ship, which this run uses only once its own sources are learned."""
    task_type = types.get(name)
    return None if isinstance(task_type, ShippedType) else task_type


def sweep_problems(
    task_id: str, task: TaskSpec, max_units: int, broken: Collection[str]
) -> dict[str, list[str]]:
    """The problems of a task's sweep: its axes, their count, the placeholders of its command."""
    at = f"tasks.{task_id}"
    if task.command is None:
        if "command" in broken:
            return {}
        return {
            f"{at}.sweep": [
                "only a command task takes a sweep (a task type sweeps by its settings)"
            ]
        }
    errors: dict[str, list[str]] = {}
    if task.image is not None:
        errors[f"{at}.image"] = [
            "a sweep runs in the run's image (environment.image), where the harness is: "
            "it takes no image of its own"
        ]
    if task.sweep is None:
        return errors  # malformed, reported by the schema: its axes are unknown
    axes = [str(name) for name in task.sweep if name not in RESERVED]
    try:
        grid = parse_sweep(task.sweep)
    except SweepError as error:
        for path, messages in error.errors.items():
            errors[f"{at}.sweep.{path}" if path else f"{at}.sweep"] = messages
    else:
        if grid.size > max_units:
            errors[f"{at}.sweep"] = [
                f"the sweep makes {grid.size:,} combinations, more than the {max_units:,} "
                "a task may have (SIMRUN_SWEEP_MAX_UNITS)"
            ]
    known = names(axes, task.inputs)
    used: set[str] = set()
    for index, arg in enumerate(task.command):
        try:
            used |= {name for _, name in parse(arg, known) if name is not None}
        except PlaceholderError as error:
            errors[f"{at}.command.{index}"] = [str(error)]
    if not any(k.startswith((f"{at}.sweep", f"{at}.command")) for k in errors):
        for axis in axes:
            if axis not in used:
                errors[f"{at}.sweep.{axis}"] = [
                    f"no argument of the command uses {{{axis}}}: every unit would run the "
                    f"same command, whatever {axis} is; write {{{axis}}} where the program "
                    "takes it"
                ]
    return errors


LOOKS_LIKE_PLACEHOLDER = re.compile(
    r"(?<![$\\{]){([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)?)}(?!})"
)
"""``{T}`` or ``{inputs.mesh}`` in an argument, not a shell's ``${T}`` nor a doubled brace."""


PROGRAM_TEXT = re.compile(r"[\s()'\"$;|&`]")
"""What an argument that is a program's text has and a placeholder's argument has not."""


def unswept_placeholders(task_id: str, task: TaskSpec) -> dict[str, list[str]]:
    """Placeholders in the command of a task without a sweep, which nothing fills: passed to
    the program as they are written, they are a mistake the user would not see. An argument
    with a space, a quote, a parenthesis or a shell's operator in it is a program's text
    (``sh -c``, ``python -c``), whose braces are its own."""
    errors: dict[str, list[str]] = {}
    for index, arg in enumerate(task.command or ()):
        if PROGRAM_TEXT.search(arg) or not (found := LOOKS_LIKE_PLACEHOLDER.search(arg)):
            continue
        errors[f"tasks.{task_id}.command.{index}"] = [
            f"{found[0]} would be passed as it is written: placeholders are filled only in a "
            f"sweep's command (add a sweep), or write {{{{{found[1]}}}}} for the braces themselves"
        ]
    return errors


def non_finite_paths(data: Any, prefix: str = "") -> list[str]:
    """The paths of the NaNs and infinities of a document, wherever they are (a task type's
    settings too): JSON's ``NaN``/``1e999`` and YAML's ``.nan``/``.inf`` parse as floats."""
    if isinstance(data, float):
        return [] if math.isfinite(data) else [prefix or "spec"]
    items: Iterable[tuple[Any, Any]]
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return []
    found = []
    for key, value in items:
        found += non_finite_paths(value, f"{prefix}.{key}" if prefix else str(key))
    return found
