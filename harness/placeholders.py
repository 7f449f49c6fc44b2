"""Placeholders in the arguments of a sweep's command: ``{T}``, ``{out}``, ``{inputs.mesh}``.

An argument is a template of literal text and placeholders, read once (``parse``) and filled
for every unit (``fill``), so a unit costs a join per argument. ``{{`` and ``}}`` are braces;
any other brace outside a placeholder is an error, so a typo is never passed on as text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence

TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)?")

Template = tuple[tuple[str, str | None], ...]
"""Pairs of literal text and the placeholder after it (None after the last text)."""


class PlaceholderError(ValueError):
    """An argument with a placeholder that is unknown, empty or a lone brace."""


def parse(arg: str, known: Collection[str]) -> Template:
    """The template of one argument; ``PlaceholderError`` naming what is wrong in it."""
    parts: list[tuple[str, str | None]] = []
    text, at = [], 0
    for match in TOKEN.finditer(arg):
        text.append(arg[at : match.start()])
        at = match.end()
        token = match.group(0)
        if token in ("{{", "}}"):
            text.append(token[0])
            continue
        name = match.group(1)
        if name is None:
            raise PlaceholderError(f"a lone {token!r} in {arg!r}: write {token * 2} for a brace")
        if name.strip() and not NAME.fullmatch(name):
            raise PlaceholderError(
                f"{token!r} is no placeholder: write {{{{ and }}}} for the braces of a shell "
                "group or of JSON"
            )
        if name not in known:
            raise PlaceholderError(unknown(name, known))
        parts.append(("".join(text), name))
        text = []
    text.append(arg[at:])
    parts.append(("".join(text), None))
    return tuple(parts)


def unknown(name: str, known: Collection[str]) -> str:
    """The message for an unknown placeholder: the known ones and the closest, if one is."""
    if not name.strip():
        return "an empty placeholder {}: write {{}} for braces"
    listed = ", ".join(f"{{{k}}}" for k in sorted(known))
    message = f"unknown placeholder {{{name}}} (known: {listed})"
    closest = difflib.get_close_matches(name, list(known), n=1)
    return f"{message}; did you mean {{{closest[0]}}}?" if closest else message


def names(axes: Sequence[str], ports: Collection[str]) -> set[str]:
    """The placeholders of a sweep: its axes, ``out``, ``unit`` and ``inputs.<port>``."""
    return {*axes, "out", "unit", *(f"inputs.{port}" for port in ports)}


def fill(template: Template, values: Mapping[str, str]) -> str:
    """An argument with its placeholders replaced by ``values``."""
    if len(template) == 1:
        return template[0][0]
    return "".join(text + (values[name] if name is not None else "") for text, name in template)
