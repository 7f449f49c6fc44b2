"""``simrun results RUN [TASK] [--csv FILE]``: a task's results table, printed or saved.

The table is the task's ``out/results.csv`` (a row per unit of a sweep), fetched whole. It is
printed as aligned columns of plain text, the same on a terminal and a pipe (no colours, no
wrapping at the terminal's width), numbers right-aligned, long cells cut; ``--csv`` saves the
file as it is instead (``-`` writes it to stdout).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from rich.console import Console

from runs.cli.client_commands import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Client,
    CliError,
    as_cli_errors,
    reports_errors,
)

NAME = "results"
HELP = "print a task's results table (a row per unit of a sweep), or save it as CSV"
CELL_CHARS = 40
"""A cell longer than this is printed cut, with an ellipsis (``--csv`` keeps all of it)."""
GAP = "  "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id")
    parser.add_argument(
        "task", nargs="?", help="the task's id (default: the run's one task with a table)"
    )
    parser.add_argument(
        "--csv", metavar="FILE", help="save the whole table as CSV to FILE (- for stdout)"
    )


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def cut(cell: str) -> str:
    cell = cell.replace("\n", " ").replace("\t", " ")
    return cell if len(cell) <= CELL_CHARS else cell[: CELL_CHARS - 1] + "…"


def read_rows(text: str) -> list[list[str]]:
    """The rows of a CSV text; ``CliError`` for one that does not read as CSV."""
    try:
        return [row for row in csv.reader(io.StringIO(text)) if row]
    except csv.Error as error:
        raise CliError(
            f"the table does not read as CSV ({error}): --csv FILE saves it as it is",
            EXIT_BAD_INPUT,
        ) from None


def aligned(rows: list[list[str]]) -> str:
    """Rows as aligned columns: a header, a rule, a line per row; a column whose every cell
    is a number (or empty) right-aligned, its name too."""
    rows = [[cut(cell) for cell in row] for row in rows]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    sizes = [max(len(row[i]) for row in rows) for i in range(width)]
    numeric = [all(is_number(row[i]) or not row[i] for row in rows[1:]) for i in range(width)]
    lines = []
    for number, row in enumerate(rows):
        cells = [
            cell.rjust(size) if right else cell.ljust(size)
            for cell, size, right in zip(row, sizes, numeric, strict=True)
        ]
        lines.append(GAP.join(cells).rstrip())
        if number == 0:
            lines.append(GAP.join("-" * size for size in sizes))
    return "\n".join(lines) + "\n"


@reports_errors
def run(args: argparse.Namespace) -> int:
    with Client() as client, as_cli_errors():  # the choice of the task fails as a call does
        text = client.results_csv(args.run_id, args.task)
    if args.csv == "-":
        sys.stdout.write(text)
        return EXIT_OK
    if args.csv:
        target = Path(args.csv)
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as error:
            raise CliError(f"cannot write {target}: {error}", EXIT_BAD_INPUT) from None
        Console(highlight=False, soft_wrap=True).print(
            f"saved the results of run {args.run_id} to {target}", markup=False
        )
        return EXIT_OK
    sys.stdout.write(aligned(read_rows(text)))
    return EXIT_OK
