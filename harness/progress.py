"""The lines a worker appends beside the ledger: ``progress.jsonl`` and the table's rows.

Each batch of lines is one ``O_APPEND`` write, so the lines of workers appending to the same
file on the store at once never interleave.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from harness.report import FAILURE_CHARS


def append_progress(
    path: Path,
    worker: str,
    units: Sequence[int],
    seconds: Sequence[float],
    failures: Sequence[str | None] = (),
) -> None:
    """Append a ``unit_done`` line per unit to ``progress.jsonl``, in one write; a unit with
    a failure (``failures``, a why or None per unit) says it last, as ``"failed": "<why>"``."""
    name = json.dumps(worker)
    whys = list(failures) or [None] * len(units)
    text = "".join(
        f'{{"unit": {unit}, "worker": {name}, "seconds": {s:.6f}'
        + (f', "failed": {json.dumps(why[:FAILURE_CHARS])}' if why is not None else "")
        + "}\n"
        for unit, s, why in zip(units, seconds, whys, strict=True)
    ).encode()
    append_lines(path, text)


def append_lines(path: Path, text: bytes) -> None:
    """Append lines to a file in one ``O_APPEND`` write (the whole of it, however many calls)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(text)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)
