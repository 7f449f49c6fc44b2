"""``simrun note RUN TEXT``: say on a run what it is for.

It sets what the run page's note sets (``POST /api/runs/RUN/labels/``), replacing the run's
note; an empty TEXT removes it. Only the run's owner (or staff) may.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from runs.cli.client_commands import EXIT_OK, Client, reports_errors

NAME = "note"
HELP = "note on a run what it is for (an empty TEXT removes the note)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id")
    parser.add_argument("text", metavar="TEXT", help="the note, replacing the run's")


@reports_errors
def run(args: argparse.Namespace) -> int:
    with Client() as client:
        note = client.labels(args.run_id, note=args.text)["note"]
    said = f"note: {note}" if note else "no note"
    Console(highlight=False, soft_wrap=True).print(f"run {args.run_id} {said}")
    return EXIT_OK
