"""The lines a worker appends beside the ledger: ``progress.jsonl`` and the table's rows.

Each batch of lines is one ``O_APPEND`` write, so the lines of workers appending to the same
file on the store at once never interleave.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from itertools import chain
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
    a failure (``failures``, a why or None per unit) says it last, as ``"failed": "<why>"``.

    The lines are one ``%`` format of a template repeated, not a format per unit: a pool
    process writes a line for every unit, and for units of 0.1 ms the per-unit formatting
    was a visible share of the harness's cost (``bench/harness_throughput.py``)."""
    line = '{"unit": %d, "worker": ' + json.dumps(worker).replace("%", "%%")
    line += ', "seconds": %.6f%s}\n'
    ends = [_failed(why) for why in failures] or [""] * len(units)
    values = tuple(chain.from_iterable(zip(units, seconds, ends, strict=True)))
    append_lines(path, ((line * len(units)) % values).encode())


def _failed(why: str | None) -> str:
    """The end of a unit's line that says why it failed; nothing for a unit that did not."""
    return "" if why is None else f', "failed": {json.dumps(why[:FAILURE_CHARS])}'


def append_lines(path: Path, text: bytes) -> None:
    """Append lines to a file in one ``O_APPEND`` write (the whole of it, however many calls)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(text)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)
