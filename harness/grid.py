"""The parameter grid of a command sweep: its axes, their pairing and sampling, unit by unit.

A sweep is the mapping a run spec gives under ``sweep`` (docs/run-spec.md, *Sweeps*): axes by
name (a list of values, ``range``, ``linspace``, ``logspace``), ``zip`` to pair axes, and
``samples`` to draw combinations instead of taking all of them. ``parse_sweep`` reads it into
a ``Grid`` that counts its combinations without listing them and gives the values of any unit
by its index, the same in the service and in every pool process; ``Grid.as_json`` is its
normalised form, deterministic, which parses to the same grid.

The order of the axes decides which unit is which combination and the order of the results'
columns, and a mapping's order does not survive the store (``write_json`` sorts its keys,
PostgreSQL's jsonb reorders them): so the normalised form names it in ``axes``, a list, which
``parse_sweep`` follows over the mapping's own order.
"""

from __future__ import annotations

import math
import random
import re
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from typing import Any, Literal, TypeGuard

AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")
RESERVED = frozenset({"axes", "zip", "samples"})
"""Keys of a sweep that are not axes."""
PLACEHOLDER_NAMES = frozenset({"out", "unit", "inputs"})
"""Placeholders the harness fills itself, so no axis may take their names."""
MAX_AXES = 32
MAX_EXPONENT = 300.0
"""A logspace's exponents stay within ±this: 10**309 is no float."""
AXIS_FORMS = (
    "a list of values, {range: [start, stop, step]}, {linspace: [start, stop, n]} "
    "or {logspace: [start, stop, n]}"
)
METHODS = ("random", "latin-hypercube")

Value = str | int | float | bool
Errors = dict[str, list[str]]


class SweepError(ValueError):
    """A sweep that cannot be read; ``errors`` maps paths within the sweep to messages."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        self.errors = dict(errors)
        super().__init__(
            "; ".join(f"{p or 'sweep'}: {' '.join(m)}" for p, m in self.errors.items())
        )


def tidy(value: float) -> float:
    """A computed float at 15 significant digits: ``0.6``, not ``0.6000000000000001``."""
    return float(f"{value:.15g}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Axis:
    """One axis: its values (``values``, ``range``, ``linspace``, ``logspace``) or, for
    ``samples`` only, an interval to draw from (``range`` or ``logspace`` of two numbers; a
    ``range`` of integers always has its step)."""

    name: str
    kind: Literal["values", "range", "linspace", "logspace"]
    args: tuple[Value, ...]

    @property
    def interval(self) -> bool:
        """Whether it is an interval (no finite list of values)."""
        return (
            self.kind in ("range", "logspace")
            and len(self.args) == 2
            and not (self.kind == "range" and all(_integer(a) for a in self.args))
        )

    # Cached (as ``Grid.size``): a sweep's pool process asks for them at every unit.
    @cached_property
    def size(self) -> int:
        """How many values it has (0 for an interval)."""
        if self.interval:
            return 0
        if self.kind == "values":
            return len(self.args)
        if self.kind == "range":
            return len(self._range)
        return int(self.args[2])

    @cached_property
    def _range(self) -> range:
        return range(*(int(a) for a in self.args))

    def value(self, index: int) -> Value:
        """The value at ``index`` (0 to ``size - 1``)."""
        if self.kind == "values":
            return self.args[index]
        if self.kind == "range":
            return self._range[index]
        start, stop, n = float(self.args[0]), float(self.args[1]), int(self.args[2])
        at = stop if index == n - 1 and n > 1 else start + (stop - start) * index / max(1, n - 1)
        return tidy(at if self.kind == "linspace" else 10.0**at)

    def draw(self, x: float) -> Value:
        """The value at ``x`` in [0, 1): a share of an interval, else of the list of values."""
        if not self.interval:
            return self.value(min(self.size - 1, int(x * self.size)))
        low, high = float(self.args[0]), float(self.args[1])
        at = low + (high - low) * x
        return tidy(at if self.kind == "range" else 10.0**at)

    def as_json(self) -> Any:
        """The normalised form: a list, or the one-key mapping with every argument given."""
        if self.kind == "values":
            return list(self.args)
        return {self.kind: list(self.args)}


@dataclass(frozen=True)
class Samples:
    """``samples``: ``n`` combinations drawn by ``method`` from a generator seeded by ``seed``."""

    n: int
    method: Literal["random", "latin-hypercube"]
    seed: int

    def shares(self, dimensions: int) -> list[array[float]]:
        """Each dimension's share in [0, 1) for every sample, the same for the same seed.

        Only ``random.Random.random`` is used, whose sequence for a seed Python keeps across
        versions; a Latin hypercube puts one sample in each of ``n`` strata of every
        dimension, the strata in an order shuffled by Fisher–Yates.
        """
        rng = random.Random(self.seed)
        found = []
        for _ in range(dimensions):
            if self.method == "random":
                found.append(array("d", (rng.random() for _ in range(self.n))))
                continue
            order = list(range(self.n))
            for last in range(self.n - 1, 0, -1):
                pick = int(rng.random() * (last + 1))
                order[last], order[pick] = order[pick], order[last]
            found.append(array("d", ((order[i] + rng.random()) / self.n for i in range(self.n))))
        return found

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "method": self.method, "seed": self.seed}


@dataclass(frozen=True)
class Grid:
    """The combinations of a sweep. A dimension is one axis or a ``zip`` group; a grid is
    their product, the last dimension varying fastest (nested loops in the spec's order);
    with ``samples`` it is ``samples.n`` draws instead."""

    axes: tuple[Axis, ...]
    dimensions: tuple[tuple[int, ...], ...]
    """The axes (by position) of every dimension, ordered by their first axis."""
    samples: Samples | None = None
    _shares: list[array[float]] = field(default_factory=list, compare=False, repr=False)

    @property
    def names(self) -> list[str]:
        return [axis.name for axis in self.axes]

    @cached_property
    def size(self) -> int:
        """The number of combinations (units)."""
        if self.samples is not None:
            return self.samples.n
        return math.prod(self.axes[d[0]].size for d in self.dimensions)

    def combination(self, unit: int) -> dict[str, Value]:
        """The value of every axis at a unit, in the axes' order."""
        if not 0 <= unit < self.size:
            raise IndexError(f"unit {unit} is not in 0 … {self.size - 1}")
        indices: dict[int, float | int] = {}
        if self.samples is not None:
            if not self._shares:
                self._shares.extend(self.samples.shares(len(self.dimensions)))
            for shares, dimension in zip(self._shares, self.dimensions, strict=True):
                for axis in dimension:
                    indices[axis] = shares[unit]
            return {a.name: a.draw(float(indices[i])) for i, a in enumerate(self.axes)}
        rest = unit
        for dimension in reversed(self.dimensions):
            rest, index = divmod(rest, self.axes[dimension[0]].size)
            for axis in dimension:
                indices[axis] = index
        return {a.name: a.value(int(indices[i])) for i, a in enumerate(self.axes)}

    def as_json(self) -> dict[str, Any]:
        """The normalised sweep: ``axes`` (their order), the axes in order, then ``zip`` and
        ``samples`` when given."""
        found: dict[str, Any] = {"axes": self.names}
        found.update((axis.name, axis.as_json()) for axis in self.axes)
        pairs = [[self.axes[i].name for i in d] for d in self.dimensions if len(d) > 1]
        if pairs:
            found["zip"] = pairs
        if self.samples is not None:
            found["samples"] = self.samples.as_json()
        return found


def _values(raw: list[Any], errors: Errors, at: str) -> tuple[Value, ...] | None:
    if not raw:
        errors[at] = ["an axis needs at least one value"]
        return None
    for i, value in enumerate(raw):
        if not isinstance(value, str | int | float):  # bool is an int
            errors[f"{at}.{i}"] = ["a value is a string, a number or a boolean"]
            return None
    return tuple(raw)


def _range(args: list[Any], errors: Errors, at: str) -> tuple[Value, ...] | None:
    if not 2 <= len(args) <= 3 or not all(_number(a) for a in args):
        errors[at] = ["range takes [start, stop] or [start, stop, step], numbers"]
        return None
    if len(args) == 2 and not all(_integer(a) for a in args):
        return tuple(args)  # an interval: refused outside samples by the caller
    if not all(_integer(a) for a in args):
        errors[at] = [
            "range takes integers, as Python's range (stop excluded); "
            "use linspace for floats, or [start, stop] alone as an interval of samples"
        ]
        return None
    if len(args) == 3 and args[2] == 0:
        errors[at] = ["the step of a range cannot be 0"]
        return None
    if not len(range(*args)):
        errors[at] = [f"range({', '.join(map(str, args))}) is empty (stop is excluded)"]
        return None
    return (*args, 1)[:3]


def _spaced(kind: str, args: list[Any], errors: Errors, at: str) -> tuple[Value, ...] | None:
    if kind == "logspace" and len(args) == 2 and all(_number(a) for a in args):
        if any(abs(a) > MAX_EXPONENT for a in args):
            errors[at] = [f"logspace's exponents are within ±{MAX_EXPONENT:g}"]
            return None
        return tuple(args)  # an interval of exponents: refused outside samples
    if len(args) != 3 or not all(_number(a) for a in args[:2]) or not _integer(args[2]):
        errors[at] = [f"{kind} takes [start, stop, n]: two numbers and an integer"]
        return None
    if args[2] < 1:
        errors[at] = [f"{kind} needs n ≥ 1 values, not {args[2]}"]
        return None
    if kind == "logspace" and any(abs(a) > MAX_EXPONENT for a in args[:2]):
        errors[at] = [f"logspace's exponents are within ±{MAX_EXPONENT:g}"]
        return None
    return tuple(args)


def _axis(name: str, raw: Any, errors: Errors) -> Axis | None:
    """One axis from its spec, or None with its problem in ``errors``."""
    if not AXIS_NAME.match(name):
        errors[name] = ["an axis name matches [A-Za-z_][A-Za-z0-9_]*, at most 40 characters"]
        return None
    if name in PLACEHOLDER_NAMES:
        errors[name] = [f"{name!r} is a placeholder simrun fills ({{{name}}}): name the axis else"]
        return None
    if isinstance(raw, list):
        values = _values(raw, errors, name)
        return None if values is None else Axis(name, "values", values)
    if not isinstance(raw, dict) or len(raw) != 1:
        errors[name] = [f"an axis is {AXIS_FORMS}"]
        return None
    kind, args = next(iter(raw.items()))
    if kind not in ("range", "linspace", "logspace") or not isinstance(args, list):
        errors[name] = [f"an axis is {AXIS_FORMS}, not {{{kind}: …}}"]
        return None
    parsed = _range(args, errors, name) if kind == "range" else _spaced(kind, args, errors, name)
    return None if parsed is None else Axis(name, kind, parsed)


def _samples(raw: Any, errors: Errors) -> Samples | None:
    if not isinstance(raw, dict):
        errors["samples"] = ["samples is {n, method: random | latin-hypercube, seed}"]
        return None
    for key in raw:
        if key not in ("n", "method", "seed"):
            errors[f"samples.{key}"] = [f"unknown field {key!r} (known: method, n, seed)"]
    n, method, seed = raw.get("n"), raw.get("method", "random"), raw.get("seed", 0)
    if not _integer(n) or n < 1:
        errors["samples.n"] = ["n, the number of samples, is an integer ≥ 1"]
    if method not in METHODS:
        errors["samples.method"] = [f"method is one of {', '.join(METHODS)}, not {method!r}"]
    if not _integer(seed):
        errors["samples.seed"] = ["seed is an integer"]
    if any(path.startswith("samples") for path in errors) or not _integer(n):
        return None
    return Samples(n, method, seed)


def _zip(raw: Any, axes: Mapping[str, Axis], errors: Errors) -> list[list[str]] | None:
    if not isinstance(raw, list) or not all(isinstance(group, list) for group in raw):
        errors["zip"] = ["zip is a list of groups of axis names: [[a, b], [c, d]]"]
        return None
    seen: set[str] = set()
    for i, group in enumerate(raw):
        at = f"zip.{i}"
        if len(group) < 2 or not all(isinstance(name, str) for name in group):
            errors[at] = ["a group zips two axes or more, by name"]
            continue
        unknown = [name for name in group if name not in axes]
        if unknown:
            errors[at] = [f"unknown axis {unknown[0]!r} (axes: {', '.join(axes) or 'none'})"]
            continue
        again = [name for name in group if name in seen or group.count(name) > 1]
        if again:
            errors[at] = [f"an axis is zipped once at most: {again[0]!r} is again"]
            continue
        seen |= set(group)
        sizes = {name: axes[name].size for name in group}
        if 0 in sizes.values():
            errors[at] = ["an interval has no values to zip: zip axes with values"]
        elif len(set(sizes.values())) > 1:
            counts = ", ".join(f"{name} has {size}" for name, size in sizes.items())
            errors[at] = [f"zipped axes need as many values each: {counts}"]
    return None if any(p.startswith("zip") for p in errors) else raw


def _order(raw: Any, names: list[str], errors: Errors) -> list[str]:
    """The axes in the order ``axes`` gives (every axis once), else the mapping's."""
    if raw is None:
        return names
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        errors["axes"] = ["axes is a list of the axis names, in the order of the units"]
        return names
    again = next((name for name in raw if raw.count(name) > 1), None)
    unknown = next((name for name in raw if name not in names), None)
    missing = next((name for name in names if name not in raw), None)
    if again is not None:
        errors["axes"] = [f"axes names every axis once: {again!r} is named twice"]
    elif unknown is not None:
        errors["axes"] = [f"axes names every axis once: {unknown!r} is no axis of the sweep"]
    elif missing is not None:
        errors["axes"] = [f"axes names every axis once, in order: {missing!r} is missing"]
    else:
        return list(raw)
    return names


def parse_sweep(raw: Any) -> Grid:
    """The grid of a sweep's spec; ``SweepError`` with every problem by its path in it."""
    if not isinstance(raw, dict):
        raise SweepError({"": ["a sweep is a mapping of axes by name"]})
    errors: Errors = {}
    given = {str(name): spec for name, spec in raw.items() if name not in RESERVED}
    names = _order(raw.get("axes"), list(given), errors)
    axes: dict[str, Axis] = {}
    for name in names:
        if (axis := _axis(name, given[name], errors)) is not None:
            axes[axis.name] = axis
    if not names:
        errors[""] = ["a sweep needs at least one axis"]
    elif len(names) > MAX_AXES:
        errors[""] = [f"a sweep has at most {MAX_AXES} axes, not {len(names)}"]
    samples = _samples(raw["samples"], errors) if "samples" in raw else None
    groups = _zip(raw["zip"], axes, errors) if "zip" in raw else []
    if samples is None and "samples" not in raw:
        for axis in axes.values():
            if axis.interval:
                errors[axis.name] = [
                    f"{axis.kind}: {list(axis.args)} is an interval, which only samples draw "
                    f"from: {'use linspace' if axis.kind == 'range' else 'give n'} for values, "
                    "or add samples"
                ]
    if errors:
        raise SweepError(errors)
    order = list(axes)
    paired = {name: group for group in groups or [] for name in group}
    dimensions: list[tuple[int, ...]] = []
    for name in order:
        group = paired.get(name, [name])
        if name == min(group, key=order.index):  # a group is a dimension at its first axis
            dimensions.append(tuple(sorted(order.index(n) for n in group)))
    return Grid(tuple(axes.values()), tuple(dimensions), samples)


def allowed_failures(allowed: int | str, units: int) -> int:
    """The failed units a task may have: a count, or a percentage of its units, rounded down."""
    if isinstance(allowed, int):
        return allowed
    return math.floor(Decimal(allowed.removesuffix("%")) * units / 100)


def percentage(text: str) -> bool:
    """Whether ``text`` is a percentage from 0 to 100 (``"2%"``, ``"0.5%"``)."""
    if not re.fullmatch(r"\d{1,3}(\.\d{1,6})?%", text):
        return False
    try:
        return Decimal(text[:-1]) <= 100
    except InvalidOperation:
        return False


def format_value(value: Value) -> str:
    """A value as an argument of a program: booleans as ``true``/``false``, floats shortest."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
