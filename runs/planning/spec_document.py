"""Reading a submitted run specification: its text (JSON, else YAML) into data, then
validated (``runs.planning.spec.validate_spec``).

No text, however malformed or large, causes anything but a ``SpecError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from harness.tasktypes import TaskType
from runs.planning.spec import DOCUMENT_NAME, MAX_DOCUMENT_BYTES, RunSpec, SpecError, validate_spec


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


def yaml_message(error: yaml.YAMLError, name: str) -> str:
    """A YAML error that names the document (``in "run.yaml", line 3``): a text's marks say
    ``"<unicode string>"``."""
    return str(error).replace('"<unicode string>"', f'"{name}"')


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
        # The message keeps its lines: its caret points into the quoted line under it.
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        said = yaml_message(error, DOCUMENT_NAME)
        raise SpecError({"spec": [f"not valid YAML or JSON: {said}"]}, line=line) from None
    except (RecursionError, ValueError, TypeError, OverflowError) as error:
        raise SpecError({"spec": [f"not valid YAML or JSON: {error}"]}) from None
    try:
        # Only what JSON can say: a spec means the same whichever of the two it came as.
        return json.loads(json.dumps(data))
    except (TypeError, ValueError, RecursionError):
        raise SpecError(
            {"spec": ["the document holds values JSON cannot (binary, sets, complex keys)"]}
        ) from None


def parse_spec(text: str | bytes, *, types: Mapping[str, TaskType]) -> RunSpec:
    """Parse and validate a submitted document (a type its sources may ship is left to them)."""
    return validate_spec(parse_document(text), types=types)
