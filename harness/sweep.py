"""``sweep``: a program run once per combination of a grid of parameters (a command sweep).

The service makes a command task with a ``sweep`` a split task of this type, whose settings
are the normalised sweep (``runs.planning.spec``); so the ledger, claims, heartbeats,
evictions, progress, memory and the retry rule are those of every split task. A unit is one
run of the program, spawned by a warm pool process (``harness.spawn``) with its placeholders
filled, in the pool process's working directory ``<scratch>/work/<pid>``, empty before every
unit, its output into ``out/units/<unit>/`` (``{out}``; ``stdout`` and ``stderr`` there when
not empty). Nothing is created or removed per unit but ``{out}`` (removed again if left
empty): on a network store each such write is a round trip. A unit
whose program exits non-zero fails the task, unless ``failures.allowed`` allows it: then it is
recorded failed with its exit code and the tail of its stderr. The merge writes the results
table (``harness.results``): the axes, exit code, seconds, peak memory and the fields of each
unit's ``results`` file.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    model_validator,
)

from harness import pool, spawn, untrusted
from harness.config import OUT_ENV, paths_from_env
from harness.grid import Grid, SweepError, Value, allowed_failures, format_value, parse_sweep
from harness.grid import percentage as is_percentage
from harness.ledger import describe
from harness.placeholders import Template, fill, names, parse
from harness.results import REUSED_FROM, Scalar, is_flat, write_table
from harness.tasktypes import MergeContext, TaskType

SWEEP_TYPE = "sweep"
UNIT_ENV = "SIMRUN_UNIT"
STDERR_TAIL = 2000
"""Bytes of the end of a failed unit's stderr kept in the table (and its log line)."""
RESULTS_CAP = 8 * 1024
"""Bytes a unit's results file may have: each unit's result is kept in the ledger and all of
them in the merge's memory, so 100,000 units hold at most 800 MiB of them."""
SIGTERM_WAIT_S = 1.0
"""How long a unit whose program a SIGTERM ended waits for the worker's stop before it counts
as failed: locally the backend's SIGTERM reaches every process of the task's tree."""
HARNESS_COLUMNS = ("unit", "exit_code", "seconds", "peak_gib", "error", REUSED_FROM)
INTEGER = re.compile(r"[-+]?\d{1,300}")
FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?(inf|nan)", re.IGNORECASE)
PYTHON = ("python", "python3")
"""A program of these names runs in the harness's interpreter, as ``simrun-exec`` does."""

log = logging.getLogger("simrun.harness")


def _results_file(value: str) -> str:
    path = PurePosixPath(value)
    if (
        not value
        or len(value) > 255
        or path.is_absolute()
        or any(p in ("", "..") for p in value.split("/"))
    ):
        raise ValueError("results is a path relative to {out}, without '..'")
    if path.suffix not in (".json", ".csv"):
        raise ValueError("results is a .json file (a flat object) or a .csv file (one row)")
    return value


def _allowed(value: int | str) -> int | str:
    if isinstance(value, int) and value < 0 or isinstance(value, str) and not is_percentage(value):
        raise ValueError("allowed is a number of units ≥ 0 or a percentage of them: 5 or '2%'")
    return value


ResultsFile = Annotated[StrictStr, AfterValidator(_results_file)]


class Failures(BaseModel):
    """How many units may fail without failing their task: a count, or ``"2%"`` of them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    allowed: Annotated[StrictInt | StrictStr, AfterValidator(_allowed)] = 0


class SweepSettings(BaseModel):
    """The settings of a command sweep: the normalised form of its task in the run spec."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    command: list[StrictStr] = Field(min_length=1, max_length=1000)
    sweep: dict[StrictStr, Any]
    ports: list[StrictStr] = Field(default_factory=list, max_length=100)
    """The task's input ports, the ``{inputs.<port>}`` its command may name."""
    results: ResultsFile | None = None
    failures: Failures = Field(default_factory=Failures)
    _grid: Grid = PrivateAttr()
    _templates: list[Template] = PrivateAttr()

    @model_validator(mode="after")
    def _read(self) -> SweepSettings:
        try:
            self._grid = parse_sweep(self.sweep)
        except SweepError as error:
            raise ValueError(f"sweep: {error}") from None
        known = names(self._grid.names, self.ports)
        self._templates = [parse(arg, known) for arg in self.command]
        return self

    # Read from the private values directly: ``self._grid`` goes through pydantic's
    # ``__getattr__`` after a failed lookup, some microseconds, and a unit reads them often.
    @property
    def grid(self) -> Grid:
        grid: Grid = self.__pydantic_private__["_grid"]  # type: ignore[index]
        return grid

    @property
    def templates(self) -> list[Template]:
        templates: list[Template] = self.__pydantic_private__["_templates"]  # type: ignore[index]
        return templates


class UnitResult(NamedTuple):
    """What one unit of a sweep gave: its combination, how its program ended, its fields."""

    values: dict[str, Value]
    exit_code: int
    seconds: float
    peak_bytes: int
    fields: dict[str, Scalar]
    error: str | None = None
    """Why it failed (its stderr's tail, or what was wrong with its results file), or None."""


class ProgramFailed(RuntimeError):
    """A unit whose program failed, where no failure is allowed (or no more): the task fails."""


def units(settings: SweepSettings) -> int:
    return settings.grid.size


@dataclass
class Context:
    """What a pool process keeps for its units: read once, in its first."""

    program: str | None
    """The program's path, None when its name holds a placeholder (found per unit)."""
    env: dict[str, str]
    out: str
    work: str
    """The working directory of this process's units, empty before each."""
    streams: tuple[int, int, int]
    """The program's standard input (``/dev/null``), output and error (files of this process
    beside ``work``, emptied before each unit and copied to ``{out}`` when not empty)."""
    home: int
    inputs: dict[str, str]
    allowed: int
    failed: int = 0


def find_program(name: str, env: dict[str, str]) -> str:
    """The path of a program: ``python`` is the harness's interpreter, a name with a ``/`` is
    relative to the working directory the worker started in, any other is looked up on PATH."""
    if name in PYTHON:
        return sys.executable
    if "/" in name:
        return os.path.abspath(name)
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise ProgramFailed(f"the program {name!r} is not on PATH ({env.get('PATH', '')})")
    return os.path.abspath(found)


def setup(settings: SweepSettings) -> Context:
    """Where the units go and the program they run, once per pool process."""
    paths = paths_from_env(os.environ)
    missing = sorted(set(settings.ports) - set(paths.inputs))
    if missing:
        raise ProgramFailed(f"the inputs {', '.join(missing)} are not in SIMRUN_INPUTS")
    out, work = paths.out / "units", paths.scratch / "work" / str(os.getpid())
    out.mkdir(parents=True, exist_ok=True)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = dict(os.environ)
    first = settings.templates[0]
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    return Context(
        program=find_program(first[0][0], env) if len(first) == 1 else None,
        env=env,
        out=str(out),
        work=str(work),
        streams=(
            os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC),
            os.open(f"{work}.stdout", flags, 0o644),
            os.open(f"{work}.stderr", flags, 0o644),
        ),
        home=os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC),
        inputs={f"inputs.{port}": str(paths.inputs[port]) for port in settings.ports},
        allowed=allowed_failures(settings.failures.allowed, settings.grid.size),
    )


def _fresh(directory: str) -> None:
    """An empty directory (one an interrupted earlier run of the unit left is emptied)."""
    try:
        os.mkdir(directory)
    except FileExistsError:
        shutil.rmtree(directory)
        os.mkdir(directory)


def _rewind(streams: tuple[int, int, int]) -> None:
    """Empty the output and error files for the next program."""
    for fd in streams[1:]:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)


def _tidy(context: Context, out: str) -> None:
    """Keep what the program printed in ``{out}``, and empty the working directory for the
    next unit; an ``{out}`` left empty is removed."""
    for fd, name in zip(context.streams[1:], ("stdout", "stderr"), strict=True):
        size = os.fstat(fd).st_size
        if size:
            copy = os.open(f"{out}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC)
            try:
                offset = 0
                while offset < size and (sent := os.sendfile(copy, fd, offset, size - offset)):
                    offset += sent
            finally:
                os.close(copy)
    with os.scandir(context.work) as entries:
        left = next(entries, None) is not None
    if left:
        shutil.rmtree(context.work)
        os.mkdir(context.work)
    try:
        os.rmdir(out)
    except OSError:
        return  # not empty: the unit's outputs


def stderr_tail(context: Context) -> str:
    """The last ``STDERR_TAIL`` bytes the unit's program wrote to its stderr, as text."""
    fd = context.streams[2]
    size = os.fstat(fd).st_size
    tail = os.pread(fd, STDERR_TAIL, max(0, size - STDERR_TAIL))
    return tail.decode(errors="replace").strip()


def _number(text: str) -> Scalar:
    """A CSV field as the value it writes: an integer, a float, else the text (empty: None)."""
    if INTEGER.fullmatch(text):
        return int(text)
    if FLOAT.fullmatch(text):
        return float(text)
    return text if text else None


def read_results(out: str, name: str) -> dict[str, Scalar]:
    """The fields of a unit's results file: a flat JSON object, or a CSV of a header and one
    row. ``ValueError`` saying what is wrong with it."""
    try:
        data = untrusted.read_bytes(out, name, RESULTS_CAP + 1)
    except FileNotFoundError:
        raise ValueError(f"it wrote no {name}") from None
    except OSError as error:
        raise ValueError(f"its {name} cannot be read: {error.strerror or error}") from None
    if len(data) > RESULTS_CAP:
        raise ValueError(f"its {name} is larger than {RESULTS_CAP} bytes")
    text = data.decode(errors="replace")
    if name.endswith(".json"):
        try:
            fields = json.loads(text)
        except ValueError as error:
            raise ValueError(f"its {name} is no JSON: {error}") from None
        if not is_flat(fields):
            raise ValueError(f"its {name} is not a flat JSON object of names and values")
        return dict(fields)
    rows = list(csv.reader(text.splitlines()))
    if len(rows) != 2 or len(rows[0]) != len(rows[1]) or len(set(rows[0])) != len(rows[0]):
        raise ValueError(f"its {name} is not a CSV of a header and one row")
    return {key: _number(value) for key, value in zip(*rows, strict=True)}


def _fail(context: Context, unit: int, why: str, result: UnitResult) -> UnitResult:
    """A failed unit, ``why`` in one line: recorded if the allowance holds in this process,
    else the task fails, saying which unit (and its parameters) and why."""
    context.failed += 1
    if context.failed > context.allowed:
        more = f" (more than the {context.allowed} failures allowed)" if context.allowed else ""
        raise ProgramFailed(f"with {parameters(result.values)}, {why}{more}")
    log.warning("unit %d failed: %s", unit, why)
    return result


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


def _stopped() -> bool:
    """Whether the worker stops within ``SIGTERM_WAIT_S``: a SIGTERM that ended a program
    was then the eviction's, not the program's own end."""
    deadline = time.monotonic() + SIGTERM_WAIT_S
    while not pool.stopping():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def compute(settings: SweepSettings, context: Context, unit: int) -> UnitResult:
    """Run the program of one unit to its end; what it gave."""
    values = settings.grid.combination(unit)
    out = f"{context.out}/{unit}"
    text = {name: format_value(value) for name, value in values.items()}
    text.update(context.inputs, out=out, unit=str(unit))
    argv = [fill(template, text) for template in settings.templates]
    program = context.program or find_program(argv[0], context.env)
    _fresh(out)
    _rewind(context.streams)
    env = {**context.env, UNIT_ENV: str(unit), OUT_ENV: out}
    try:
        ended = spawn.run(
            program, argv, env, cwd=context.work, home=context.home, streams=context.streams
        )
    except OSError as error:
        raise ProgramFailed(f"{argv[0]} cannot be started: {error.strerror or error}") from None
    finally:
        _tidy(context, out)
    if ended.code == -signal.SIGKILL:
        raise pool.Killed(f"the program of unit {unit} was killed (SIGKILL)")
    if ended.code == -signal.SIGTERM and _stopped():
        raise pool.Interrupted(f"the program of unit {unit} was stopped (SIGTERM)")
    result = UnitResult(values, ended.code, ended.seconds, ended.peak_bytes, {})
    if ended.code != 0:
        tail = stderr_tail(context)
        if tail:
            log.info("unit %d: the end of the stderr of %s:\n%s", unit, argv[0], tail)
        why = f"{argv[0]} exited {ended.code}" + (f": {last_line(tail)}" if tail else "")
        return _fail(context, unit, why, result._replace(error=tail or f"exit {ended.code}"))
    if settings.results is None:
        return result
    try:
        return result._replace(fields=read_results(out, settings.results))
    except ValueError as error:
        why = f"{argv[0]} exited 0 but {error}"
        return _fail(context, unit, why, result._replace(error=str(error)))


class FailuresExceeded(RuntimeError):
    """More units failed than the task allows: the merge fails after writing the table."""


def unit_row(settings: SweepSettings, unit: int, result: UnitResult) -> dict[str, Scalar]:
    """A unit's row of the results table: ``unit``, the axes, ``exit_code``, ``seconds``,
    ``peak_gib``, its results' fields (one named like a column before it as
    ``results.<name>``) and, for a failed unit, ``error``: the last line of its stderr (a
    traceback's exception), its whole tail being in ``{out}/stderr``."""
    axes = settings.grid.names
    taken = {*axes, *HARNESS_COLUMNS}
    row: dict[str, Scalar] = {
        "unit": unit,
        **{axis: result.values.get(axis) for axis in axes},
        "exit_code": result.exit_code,
        "seconds": round(result.seconds, 6),
        "peak_gib": round(result.peak_bytes / 2**30, 6),
    }
    for key, value in result.fields.items():
        row[f"results.{key}" if key in taken else key] = value
    if result.error is not None:
        row["error"] = last_line(result.error) or f"exit {result.exit_code}"
    return row


def unit_failure(settings: SweepSettings, unit: int, result: UnitResult) -> str | None:
    """Why a unit failed in one line, its parameters first; None when it did not fail."""
    if result.error is None:
        return None
    error = last_line(result.error) or f"exit {result.exit_code}"
    return f"unit {unit} ({parameters(result.values)}): {error}"


def parameters(values: dict[str, Value]) -> str:
    return ", ".join(f"{name}={format_value(value)}" for name, value in values.items())


def table(
    settings: SweepSettings, results: Sequence[UnitResult]
) -> tuple[list[str], list[list[Scalar]]]:
    """The columns and rows of a sweep's results table (``harness.results``): a row per unit
    (``unit_row``), the results' fields in the order first seen, ``error`` last if a unit has
    one."""
    rows = [unit_row(settings, unit, result) for unit, result in enumerate(results)]
    columns = list(dict.fromkeys(key for row in rows for key in row if key != "error"))
    if any("error" in row for row in rows):
        columns.append("error")
    return columns, [[row.get(column) for column in columns] for row in rows]


def merge(settings: SweepSettings, context: MergeContext) -> None:
    """Write the results table; fail when more units failed than allowed."""
    results: list[UnitResult] = list(context.results)
    columns, rows = table(settings, results)
    write_table(context.out, columns, rows, context.reused_from)
    failed = [unit for unit, result in enumerate(results) if result.error is not None]
    allowed = allowed_failures(settings.failures.allowed, len(results))
    if len(failed) > allowed:
        raise FailuresExceeded(
            f"{len(failed)} of {len(results)} units failed, {allowed} allowed "
            f"(failures.allowed): units {describe([range(u, u + 1) for u in failed])}"
        )


TASK_TYPE = TaskType(
    name=SWEEP_TYPE,
    settings=SweepSettings,
    units=units,
    setup=setup,
    compute=compute,
    merge=merge,
    row=unit_row,
    failure=unit_failure,
    base_gb=0.25,
    per_worker_gb=1.0,
    description="a program run once per combination of a grid of parameters",
)
"""The type of a command sweep; a spec names it by ``command`` and ``sweep``, never by name."""
