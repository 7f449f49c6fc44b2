"""The results table of a split task: one row per unit, ``out/results.csv`` and Parquet.

The merge of a command sweep writes it (``harness.sweep``), and so does the merge of any
split type whose units all return a flat mapping (``ising``): the first column is ``unit``,
the rows are in unit order. The table of a task that reused units of an earlier one (a resume)
ends in a ``reused_from`` column: ``<run>/<task>`` of the task that computed the row, empty for
the rows this task computed. Values are written so that ``pandas.read_csv`` reads numbers as
numbers: integers as integers, floats in their shortest exact form (``nan`` and ``inf`` too),
booleans as ``True``/``False``, a missing value as an empty field. ``out/results.parquet``
holds the same where ``pyarrow`` is installed, each column of one type.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

from harness.files import temporary_name, write_atomic

RESULTS_CSV = "results.csv"
RESULTS_PARQUET = "results.parquet"
REUSED_FROM = "reused_from"
MAX_FIELDS = 256
"""Columns a flat mapping may add to the table at most (a result is no table of its own)."""

Scalar = str | int | float | bool | None


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float)


def is_flat(value: Any) -> bool:
    """Whether a unit's result is a flat mapping: names to strings, numbers, booleans, None."""
    return (
        isinstance(value, Mapping)
        and 0 < len(value) <= MAX_FIELDS
        and all(isinstance(k, str) and is_scalar(v) for k, v in value.items())
    )


def first_seen(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys of mappings in the order they first appear."""
    return list(dict.fromkeys(key for row in rows for key in row))


def cell(value: Scalar) -> str:
    """A value as a CSV field pandas reads back as the same value."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def write_table(
    out: Path,
    columns: Sequence[str],
    rows: Sequence[Sequence[Scalar]],
    reused_from: Mapping[int, str] | None = None,
) -> None:
    """Write ``out/results.csv`` (and ``out/results.parquet`` with pyarrow), each atomically:
    ``rows`` in unit order, with the ``reused_from`` column when any unit was reused."""
    if reused_from:
        columns = [*columns, REUSED_FROM]
        rows = [[*row, reused_from.get(unit, "")] for unit, row in enumerate(rows)]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([cell(v) for v in row] for row in rows)
    data = text.getvalue().encode()
    write_atomic(out / RESULTS_CSV, data)
    types = [column_type(rows, index) for index in range(len(columns))]
    _write_parquet(out / RESULTS_PARQUET, data, columns, types)


def write_mappings(
    out: Path, results: Sequence[Mapping[str, Scalar]], reused_from: Mapping[int, str]
) -> None:
    """The table of a split type whose units returned flat mappings: ``unit``, then their
    keys in the order first seen (a key named ``unit`` or ``reused_from`` is written as
    ``results.<key>``)."""
    keys = first_seen(results)
    taken = {"unit", REUSED_FROM}
    columns = ["unit", *(f"results.{key}" if key in taken else key for key in keys)]
    rows = [[unit, *(row.get(k) for k in keys)] for unit, row in enumerate(results)]
    write_table(out, columns, rows, reused_from)


ColumnType = Literal["null", "bool_", "int64", "float64", "string"]
"""The type of a column in the Parquet file, by the name of pyarrow's function for it."""


def column_type(rows: Sequence[Sequence[Scalar]], index: int) -> ColumnType:
    """The type Parquet stores one column of the table as: numbers as floats if any is a
    float, everything as text if the column mixes text with other values."""
    kinds = {type(row[index]) for row in rows if row[index] is not None}
    if not kinds:
        return "null"
    for kind, name in ((bool, "bool_"), (int, "int64"), (str, "string")):
        if kinds == {kind}:
            return cast(ColumnType, name)
    return "float64" if kinds <= {int, float} else "string"


def _write_parquet(
    path: Path, table_csv: bytes, columns: Sequence[str], types: Sequence[ColumnType]
) -> None:
    """Write the table again as Parquet, read back from its CSV by pyarrow's own reader with
    each column's type given: building it from Python values instead makes pyarrow import
    pandas, which cost a merge more than the rest of it (a second on a busy machine)."""
    try:
        import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]
        import pyarrow.csv as pa_csv  # type: ignore[import-not-found, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return
    kinds = {name: getattr(pa, kind)() for name, kind in zip(columns, types, strict=True)}
    table = pa_csv.read_csv(
        pa.py_buffer(table_csv),
        # pyarrow's thread pool, once started, aborted one worker in 40 at its exit
        # ("terminate called without an active exception", exit 134) after a sound merge.
        read_options=pa_csv.ReadOptions(use_threads=False),
        convert_options=pa_csv.ConvertOptions(
            column_types=kinds,
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            true_values=["True"],
            false_values=["False"],
        ),
    )
    temporary = temporary_name(path)
    try:
        pq.write_table(table, temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
