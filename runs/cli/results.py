"""``simrun results RUN [TASK] [--csv FILE]``: a task's results table, printed or saved;
``simrun results RUN RUN... [--task T]``: the tables of runs as one, a ``run`` column first.

The table is the task's ``out/results.csv`` (a row per unit of a sweep), fetched whole;
``--filter`` and ``--over`` view it as the pages do (rows where clauses hold, averaged over
a parameter), as do several runs (``GET /api/results/``, the rows the service keeps). It is
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
from runs.client.frames import rows_csv

NAME = "results"
HELP = "print a task's results table (a row per unit of a sweep), or save it as CSV"
CELL_CHARS = 40
"""A cell longer than this is printed cut, with an ellipsis (``--csv`` keeps all of it)."""
GAP = "  "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id")
    parser.add_argument(
        "more",
        nargs="*",
        metavar="TASK|RUN",
        help="the task's id (default: the run's one task with a table), or more runs to "
        "compare with it: one table, a run column first",
    )
    parser.add_argument("--task", help="the task of each run compared (default: its one table)")
    parser.add_argument(
        "--filter", help="only the rows where clauses hold: 'T >= 1 and method = mc'"
    )
    parser.add_argument("--over", help="average over this parameter (a seed): mean, std, min, max")
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


def targets(client: Client, args: argparse.Namespace) -> tuple[list[str], str | None]:
    """The runs asked for and their task: ``RUN TASK`` when the second names a task of the
    first run, else every argument is a run."""
    if len(args.more) == 1 and not args.task:
        tasks = {task["id"] for task in client.run(args.run_id).tasks}
        if args.more[0] in tasks:
            return [args.run_id], args.more[0]
    return [args.run_id, *args.more], args.task


def said_partial(client: Client, run_id: str, task: str | None, units: int) -> None:
    """Say on stderr that a table is partial, as the run page does: the run ended before the
    task merged its units, these are the units it finished (stdout stays the table alone)."""
    task = task or client.results_task(run_id)
    state = client.run(run_id).state
    ended = "was cancelled" if state == "cancelled" else state
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"partial: run {run_id} {ended} before {task} merged its units; these are the "
        f"{units} unit{'' if units == 1 else 's'} it finished",
        markup=False,
    )


def said_notes(notes: list[str]) -> None:
    """Say on stderr what a table of runs leaves out or holds partial (stdout: the table)."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    for note in notes:
        console.print(f"note: {note}", markup=False)


@reports_errors
def run(args: argparse.Namespace) -> int:
    with Client() as client, as_cli_errors():  # the choice of the task fails as a call does
        runs, task = targets(client, args)
        if len(runs) == 1 and not args.filter and not args.over:
            text, partial = client.whole_or_partial_csv(runs[0], task)
            if partial:
                said_partial(client, runs[0], task, len(read_rows(text)) - 1)
        else:
            found = client.compared_rows(runs, task, filter=args.filter, over=args.over)
            text = rows_csv(found.columns, found.rows)
            said_notes(found.notes)
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
