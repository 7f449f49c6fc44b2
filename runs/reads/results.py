"""A task's results table, ``out/results.csv``, as the pages and the API read it.

The merge of a split task writes it: a header, then a row per unit (``unit``, the parameters,
``exit_code``, ``seconds``, ``peak_gib``, the fields of each unit's results). But the file is
the task's: it is opened as any file of the store (walked from the store's root without
links, without blocking, a regular file only) and read within budgets: at most
``SIMRUN_RESULTS_MAX_BYTES`` of it, ``SIMRUN_RESULTS_MAX_ROWS`` rows of at most
``SIMRUN_RESULTS_MAX_COLUMNS`` columns, each physical line parsed up to ``LINE_CHARS``.
Whatever did not fit is left out and said in ``notes``; a malformed file is read up to where
it stops reading as CSV. Any column whose cells all read as numbers is numeric.

A table is parsed once per web process while its file is unchanged (``ParsedTables``): a
page, a sort or a plot of it again costs a ``stat`` and the rows it shows, not a parse of up to
``SIMRUN_RESULTS_MAX_BYTES``; requests for it at once wait for one parse.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

from django.conf import settings

from harness import untrusted
from harness.report import UNIT_ROWS
from harness.results import cell, is_scalar
from runs.common.store import TaskFolder

CSV_NAME = "results.csv"
PARQUET_NAME = "results.parquet"
LINE_CHARS = 256 * 1024
"""A physical line is parsed up to this many characters: a header of a million columns costs
no more than this one line."""
MISSING = frozenset({"", "nan", "NaN", "NA", "N/A", "n/a", "null", "None", "none"})
"""Cells that are no value, in a numeric column as in any other."""
BOOKKEEPING = ("unit", "exit_code", "seconds", "peak_gib", "error")
"""The columns the merge adds around the parameters and the result fields."""
ORDERS_KEPT = 4
"""The orders of a table kept (the most recently asked): each holds an index a row."""
_ORDERS_LOCK = threading.Lock()
INTEGER_DIGITS = 18
"""An integer cell of more digits is given as a float (Python refuses to parse huge ones)."""


@dataclass(frozen=True)
class Limits:
    """The budgets of one read of a results table."""

    max_bytes: int
    max_rows: int
    max_columns: int

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            max_bytes=settings.SIMRUN_RESULTS_MAX_BYTES,
            max_rows=settings.SIMRUN_RESULTS_MAX_ROWS,
            max_columns=settings.SIMRUN_RESULTS_MAX_COLUMNS,
        )


class Unreadable(Exception):
    """The task's ``out/results.csv`` exists but is no regular file the service may read."""


@dataclass
class Results:
    """A results table as read: its columns, the rows kept (unit order), their count."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    count: int
    """Rows read, those beyond ``max_rows`` included (counted, not kept)."""
    complete: bool
    """The whole file was read: ``count`` is every row of it."""
    size: int
    """The file's size in bytes."""
    notes: list[str] = field(default_factory=list)
    """What was left out, and why, in words for the page and the API."""
    numbers: dict[str, list[float | None]] = field(default_factory=dict)
    """The values of each numeric column, a row each (None: no value)."""
    partial: bool = False
    """The rows of the units a task finished before it ended unmerged (``read_partial``)."""
    orders: dict[tuple[str | None, bool], list[int]] = field(default_factory=dict, repr=False)
    """The orders asked so far, the most recent last: a table is read by many requests."""
    views: dict[tuple[str, str], Results] = field(default_factory=dict, repr=False)
    """The views made of it (``table_views.view``: filtered, averaged), most recent last."""
    sources: list[Results] = field(default_factory=list, repr=False)
    """The tables a combined one was made of (``runs.reads.comparison``), held while it is."""
    grouped: tuple[str, ...] | None = None
    """The parameters of an averaged view (its first columns); None for a table as read."""

    def numeric(self, column: str) -> bool:
        return column in self.numbers

    def values(self, column: str) -> list[str]:
        index = self.columns.index(column)
        return [row[index] for row in self.rows]

    def parameters(self) -> list[str]:
        """The columns between ``unit`` and ``exit_code``, as the merge of a sweep writes them
        (of an averaged view: the parameters it kept)."""
        if self.grouped is not None:
            return list(self.grouped)
        if "unit" not in self.columns or "exit_code" not in self.columns:
            return []
        return list(self.columns[self.columns.index("unit") + 1 : self.columns.index("exit_code")])

    def result_fields(self) -> list[str]:
        """The columns after ``peak_gib``; without it, every column but the bookkeeping."""
        if self.grouped is not None:
            return [c for c in self.columns if c not in self.grouped and c != "n"]
        if "peak_gib" in self.columns:
            after = self.columns[self.columns.index("peak_gib") + 1 :]
            return [c for c in after if c not in BOOKKEEPING]
        return [c for c in self.columns if c not in BOOKKEEPING and c not in self.parameters()]

    def order(self, column: str | None, *, descending: bool = False) -> list[int]:
        """The indexes of the rows sorted by a column (numbers as numbers), cells without a
        value last whatever the direction; equal cells keep the unit order."""
        key = (column, descending)
        with _ORDERS_LOCK:  # a table read is shared by the requests of every thread
            kept = self.orders.pop(key, None)
            if kept is not None:
                self.orders[key] = kept
                return kept
        made = self._sorted(column, descending=descending)
        with _ORDERS_LOCK:
            self.orders[key] = made
            while len(self.orders) > ORDERS_KEPT:  # a row index each: sorts on every column add up
                self.orders.pop(next(iter(self.orders)))
        return made

    def _sorted(self, column: str | None, *, descending: bool) -> list[int]:
        indexes = list(range(len(self.rows)))
        if column is None:
            return indexes[::-1] if descending else indexes
        if column in self.numbers:
            numbers = self.numbers[column]
            present = [i for i in indexes if numbers[i] is not None]
            present.sort(key=lambda i: numbers[i] or 0.0, reverse=descending)
        else:
            cells = self.values(column)
            present = [i for i in indexes if cells[i] not in MISSING]
            present.sort(key=lambda i: cells[i], reverse=descending)
        kept = set(present)
        return present + [i for i in indexes if i not in kept]

    def typed(self, index: int) -> dict[str, str | int | float | None]:
        """A row as JSON gives it: numbers as numbers, no value as null."""
        row = self.rows[index]
        return {
            column: typed_cell(cell) if column in self.numbers else cell
            for column, cell in zip(self.columns, row, strict=True)
        }


def typed_cell(cell: str) -> int | float | None:
    """A cell of a numeric column as a JSON number; None for no value or one JSON cannot hold."""
    text = cell.strip()
    if text in MISSING:
        return None
    digits = text.lstrip("+-")
    if digits.isdigit() and len(digits) <= INTEGER_DIGITS:
        return int(text)
    value = float(text)
    return value if math.isfinite(value) else None


def number(cell: str) -> float | None:
    """A cell as a number, None for no value; ``ValueError`` for a cell that is no number."""
    text = cell.strip()
    if text in MISSING:
        return None
    value = float(text)
    return None if math.isnan(value) else value


def file_entry(folder: TaskFolder, name: str) -> int | None:
    """The size of ``out/<name>`` of a task, None when there is none; ``Unreadable`` for one
    that is no regular file (a link, a FIFO, a folder)."""
    try:
        return untrusted.file_size(folder.base, folder / f"out/{name}")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Unreadable(f"out/{name} is not a regular file the service reads ({error})") from None


def open_results(folder: TaskFolder, name: str = CSV_NAME) -> BinaryIO | None:
    """``out/<name>`` of a task opened for reading, None when there is none; ``Unreadable``
    for anything but a regular file."""
    try:
        return untrusted.open_file(folder.base, folder / f"out/{name}")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Unreadable(f"out/{name} is not a regular file the service reads ({error})") from None


class ParsedTables:
    """The tables a process parsed, by their file's identity and the budgets they were read
    with, least recently read dropped first past ``budget`` bytes of files. A file changed in
    any way (its size, its times, another file in its place) is another key. Requests that
    ask for one table at once wait for one parse of it (``parsing``), not one each."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._tables: OrderedDict[Hashable, tuple[Results, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self._parsing: dict[Hashable, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def parsing(self, key: Hashable) -> Iterator[None]:
        """Hold the parse of ``key``: a second request for it waits here for the first's
        (then finds it with ``get``) instead of parsing it too."""
        with self._lock:
            lock, waiting = self._parsing.get(key, (threading.Lock(), 0))
            self._parsing[key] = (lock, waiting + 1)
        try:
            with lock:
                yield
        finally:
            with self._lock:
                lock, waiting = self._parsing[key]
                if waiting == 1:
                    del self._parsing[key]
                else:
                    self._parsing[key] = (lock, waiting - 1)

    def get(self, key: Hashable) -> Results | None:
        with self._lock:
            found = self._tables.get(key)
            if found is None:
                return None
            self._tables.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, results: Results, cost: int) -> None:
        with self._lock:
            if key in self._tables or cost > self.budget:
                return
            self._tables[key] = (results, cost)
            self._held += cost
            while self._held > self.budget:
                _, (_, dropped) = self._tables.popitem(last=False)
                self._held -= dropped


PARSED = ParsedTables(settings.SIMRUN_RESULTS_CACHE_MB * 2**20)


class Parser(Protocol):
    """Reads a table from a file's bytes (at most the budget's and one), knowing its size."""

    __name__: str

    def __call__(self, data: bytes, limits: Limits, *, size: int) -> Results: ...


def read_results(folder: TaskFolder, limits: Limits | None = None) -> Results | None:
    """A task's results table within the budgets; None when it has none. Parsed once while
    its file is unchanged (``PARSED``)."""
    limits = limits or Limits.from_settings()
    file = open_results(folder)
    if file is None:
        return None
    return _parsed_once(file, parse, limits)


def read_partial(folder: TaskFolder, limits: Limits | None = None) -> Results | None:
    """The table of the units a split task finished, from the rows its workers appended to
    ``rows.jsonl`` as each unit ended (``harness.report.UNIT_ROWS``): what a cancelled or
    failed sweep shows instead of the merge's table. None without the file. Read within the
    budgets and parsed once while the file is unchanged, as ``read_results``."""
    limits = limits or Limits.from_settings()
    try:
        file = untrusted.open_file(folder.base, folder / UNIT_ROWS)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Unreadable(f"{UNIT_ROWS} is not a regular file the service reads ({error})") from None
    return _parsed_once(file, parse_rows, limits)


def _parsed_once(file: BinaryIO, parser: Parser, limits: Limits) -> Results:
    """The table of an open file (closed here) as ``parser`` reads it, from ``PARSED`` while
    the file is unchanged; requests for it at once wait for one parse."""
    with file:
        st = os.fstat(file.fileno())
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        key = (parser.__name__, stamp, limits)
        if (kept := PARSED.get(key)) is not None:
            return kept
        with PARSED.parsing(key):
            if (kept := PARSED.get(key)) is not None:
                return kept
            data = file.read(limits.max_bytes + 1)
            results = parser(data, limits, size=st.st_size)
            PARSED.put(key, results, cost=len(data))
    return results


def parse_rows(data: bytes, limits: Limits, *, size: int) -> Results:
    """The table of ``rows.jsonl``'s bytes: a row per unit (the last line of a unit stored
    twice), in unit order, the columns in the order first seen with ``error`` last."""
    notes: list[str] = []
    if len(data) > limits.max_bytes:
        data = data[: data.rfind(b"\n", 0, limits.max_bytes) + 1]
        notes.append(f"too large: {size:,} bytes of rows, only the first {len(data):,} read")
    by_unit: dict[int, dict[str, object]] = {}
    for line in data.splitlines():
        try:
            entry = json.loads(line)
            by_unit[int(entry["unit"])] = dict(entry["row"])
        except (ValueError, TypeError, KeyError):
            continue  # a line cut by the end of a write, or no row: not a unit's row
    names = dict.fromkeys(name for row in by_unit.values() for name in row)
    names.pop("error", None)
    if any("error" in row for row in by_unit.values()):
        names["error"] = None
    columns = column_names(list(names)[: limits.max_columns])
    units = sorted(by_unit)
    rows = [
        tuple(csv_cell(by_unit[unit].get(name)) for name in columns)
        for unit in units[: limits.max_rows]
    ]
    if len(units) > limits.max_rows:
        notes.append(f"too large: {len(units):,} rows, showing the first {limits.max_rows:,}")
    results = Results(columns, rows, len(units), False, size, notes, partial=True)
    results.numbers = numeric_columns(columns, rows)
    return results


def csv_cell(value: object) -> str:
    """A JSON value as the merge writes it into a cell (``harness.results.cell``)."""
    return cell(value) if is_scalar(value) else json.dumps(value)  # type: ignore[arg-type]


def read_table(folder: TaskFolder, limits: Limits | None = None) -> Results | None:
    """A task's results table: the merge's ``out/results.csv``, else the rows of the units
    it finished (``read_partial``, marked ``partial``); None when it has neither."""
    found = read_results(folder, limits)
    return found if found is not None else read_partial(folder, limits)


def table_entry(folder: TaskFolder) -> bool:
    """Whether a task has a table to show (the merge's or the rows of its units): an entry
    that is no regular file counts, and is shown as a problem."""
    try:
        if file_entry(folder, CSV_NAME) is not None:
            return True
        return untrusted.file_size(folder.base, folder / UNIT_ROWS) is not None
    except FileNotFoundError:
        return False
    except (OSError, Unreadable):
        return True


def parse(data: bytes, limits: Limits, *, size: int) -> Results:
    """The table of a CSV's bytes (at most ``limits.max_bytes`` of them are read)."""
    notes: list[str] = []
    complete = len(data) <= limits.max_bytes
    if not complete:
        data = data[: limits.max_bytes]
        data = data[: data.rfind(b"\n") + 1]  # the last line read may be cut anywhere
        notes.append(
            f"too large: the file holds {size:,} bytes, only its first "
            f"{limits.max_bytes:,} are read"
        )
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    if "\ufffd" in text:
        notes.append("the file is not all UTF-8: what is not shows as \ufffd")
    cut: list[int] = []
    reader = csv.reader(bounded_lines(text, cut))
    try:
        header = next(reader, [])
    except csv.Error as error:
        notes.append(f"the header does not read as CSV ({error})")
        header = []
    if len(header) > limits.max_columns:
        notes.append(
            f"too many columns: the header names {len(header):,}"
            f"{' or more' if cut else ''}, only the first {limits.max_columns} are read"
        )
    columns = column_names(header[: limits.max_columns])
    width = len(columns)
    rows: list[tuple[str, ...]] = []
    count = 0
    try:
        for row in reader:
            if not row:
                continue
            count += 1
            if len(rows) < limits.max_rows:
                rows.append(tuple((row + [""] * width)[:width]))
    except csv.Error as error:
        complete = False
        notes.append(
            f"line {reader.line_num} does not read as CSV ({error}): the rows from it on "
            "are left out"
        )
    if count > limits.max_rows:
        notes.append(f"too large: {count:,} rows, showing the first {limits.max_rows:,}")
    if cut:
        notes.append(
            f"{len(cut)} line(s) longer than {LINE_CHARS // 1024} KiB (the first is line "
            f"{cut[0]}): only their start is read"
        )
    results = Results(columns, rows, count, complete, size, notes)
    results.numbers = numeric_columns(columns, rows)
    return results


def bounded_lines(text: str, cut: list[int]) -> Iterator[str]:
    """The physical lines of a text, each cut at ``LINE_CHARS`` (their numbers into ``cut``)."""
    for number_, line in enumerate(io.StringIO(text, newline=""), start=1):
        if len(line) > LINE_CHARS:
            cut.append(number_)
            line = line[:LINE_CHARS] + "\n"
        yield line


def column_names(header: list[str]) -> tuple[str, ...]:
    """The header's names made usable: stripped, an empty one named by its place, a repeated
    one given a suffix (``seed.1``), so that each column has a name of its own."""
    names: list[str] = []
    seen: set[str] = set()
    for place, raw in enumerate(header, start=1):
        name = raw.strip() or f"column {place}"
        candidate, suffix = name, 1
        while candidate in seen:
            candidate, suffix = f"{name}.{suffix}", suffix + 1
        seen.add(candidate)
        names.append(candidate)
    return tuple(names)


def numeric_columns(
    columns: tuple[str, ...], rows: list[tuple[str, ...]]
) -> dict[str, list[float | None]]:
    """The columns whose every cell is a number or no value (and one at least a number)."""
    found: dict[str, list[float | None]] = {}
    for index, column in enumerate(columns):
        try:
            values = [number(row[index]) for row in rows]
        except ValueError:
            continue
        if any(value is not None for value in values):
            found[column] = values
    return found
