"""A CSV a task wrote (its results table, any ``.csv`` or ``.tsv`` of its outputs) as a
download a spreadsheet opens without running anything in it.

A cell a task wrote that starts with ``=``, ``+``, ``-``, ``@`` (or a tab or a carriage
return) is a formula to Excel, LibreOffice and Google Sheets: it may fetch a URL or run a
command on the reader's machine. Such a cell gets a leading ``'`` (OWASP's advice), unless it
is a plain number (``-1.5`` stays a number). The API's pages and the Parquet keep the true
values; only the CSV a person downloads is changed.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from itertools import islice
from typing import BinaryIO

FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
CHUNK_ROWS = 1000
"""Rows written out at a time: the download streams, whatever the file's size."""


def inert_cell(cell: str) -> str:
    """The cell, quoted out of being a formula where a spreadsheet would take it for one."""
    if not cell.startswith(FORMULA_LEADS):
        return cell
    try:
        if not math.isnan(float(cell)):
            return cell
    except ValueError:
        pass
    return "'" + cell


def inert_rows(file: BinaryIO, delimiter: str = ",") -> Iterator[bytes]:
    """The CSV of ``file`` (UTF-8; ``delimiter`` between cells) with every cell made inert,
    in chunks, its line ending kept; the file is closed at the end."""
    with io.TextIOWrapper(file, encoding="utf-8", errors="replace", newline="") as text:
        first = text.readline()
        ending = "\r\n" if first.endswith("\r\n") else "\n"
        rows = csv.reader(_chain(first, text), delimiter=delimiter)
        out = io.StringIO()
        writer = csv.writer(out, delimiter=delimiter, lineterminator=ending)
        while True:
            chunk = [[inert_cell(cell) for cell in row] for row in islice(rows, CHUNK_ROWS)]
            if not chunk:
                return
            writer.writerows(chunk)
            yield out.getvalue().encode()
            out.seek(0)
            out.truncate()


def _chain(first: str, rest: io.TextIOWrapper) -> Iterator[str]:
    if first:
        yield first
    yield from rest
