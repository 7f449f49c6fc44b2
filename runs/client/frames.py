"""Tables as pandas DataFrames (pandas is optional: imported only when asked) and as CSV text."""

from __future__ import annotations

import csv
import io
import json
from typing import Any, NamedTuple

from runs.client.errors import MissingPandas, SimrunError

KINDS = "CSV (.csv), TSV (.tsv), JSON (.json) or JSON lines (.jsonl, .ndjson)"


def pandas(instead: str = "output() reads it as text or bytes") -> Any:
    """The pandas module, or ``MissingPandas`` saying how to install it (and what ``instead``
    needs nothing)."""
    try:
        import pandas
    except ImportError:
        raise MissingPandas(
            "a DataFrame needs pandas, which is not installed: `pip install pandas` "
            f"(or {instead}, which needs nothing)"
        ) from None
    return pandas


def frame(pd: Any, text: str, path: str, **read: Any) -> Any:
    """The DataFrame of an output file's text, read by the kind its name says.

    A JSON list of records (objects, nested ones flattened to ``a.b`` columns) is a row per
    record; an object of columns a column each; any other object one row.
    """
    kind = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if kind == "csv":
        return pd.read_csv(io.StringIO(text), **read)
    if kind == "tsv":
        return pd.read_csv(io.StringIO(text), sep="\t", **read)
    if kind in ("jsonl", "ndjson"):
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        return pd.json_normalize(records, **read)
    if kind == "json":
        data = json.loads(text)
        if isinstance(data, list):
            if all(isinstance(item, dict) for item in data):
                return pd.json_normalize(data, **read)
            return pd.DataFrame({"value": data})
        if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
            return pd.DataFrame(data, **read)
        return pd.json_normalize(data, **read)
    raise SimrunError(f"cannot read {path!r} as a DataFrame: it is no {KINDS}")


class Rows(NamedTuple):
    """A table the API gave in pages: its columns, every row, and its ``notes`` (what was
    left out, a run whose rows are partial), which a table shown without them would hide."""

    columns: list[str]
    rows: list[dict[str, Any]]
    notes: list[str]


def rows_csv(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """Rows of the API's pages as CSV text: a header, a line per row, no value as empty."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([["" if row[c] is None else row[c] for c in columns] for row in rows])
    return text.getvalue()
