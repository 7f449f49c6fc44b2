"""A run specification as the client submits it: a mapping, a text or a file; read as the
server reads it, with the local source folders it names.

Never imports Django.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

SNAPSHOT_ID = re.compile(r"^[0-9a-f]{64}$")
Spec = Mapping[str, Any] | str | os.PathLike[str]
"""A run specification: a mapping, a YAML or JSON text, or the path of a file holding one."""


def read_document(text: str) -> Any:
    """A spec's document as JSON, else YAML, as the server reads it; a ``YAMLError`` where
    the text stops reading as either."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    return yaml.safe_load(text)


def names_a_file(spec: str) -> bool:
    """Whether a string is a file's path rather than a spec's text: one line naming a file."""
    return "\n" not in spec and len(spec) < 4096 and Path(spec).expanduser().is_file()


def local_sources(document: Any) -> list[tuple[int, str]]:
    """The entries of ``sources`` that are paths, not snapshot ids, with their index."""
    if not isinstance(document, dict) or not isinstance(document.get("sources"), list):
        return []
    return [
        (i, s)
        for i, s in enumerate(document["sources"])
        if isinstance(s, str) and not SNAPSHOT_ID.match(s)
    ]
