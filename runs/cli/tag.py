"""``simrun tag RUN TAG... [--remove]``: file a run under tags, or take them off.

It sets what the run page's tags set (``POST /api/runs/RUN/labels/``); ``simrun runs --tag``
then finds the run. Only the run's owner (or staff) may.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from runs.cli.client_commands import EXIT_OK, Client, reports_errors

NAME = "tag"
HELP = "file a run under tags (simrun runs --tag finds it)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id")
    parser.add_argument("tags", metavar="TAG", nargs="+", help="a word to find the run by")
    parser.add_argument("-r", "--remove", action="store_true", help="take these tags off")


@reports_errors
def run(args: argparse.Namespace) -> int:
    with Client() as client:
        tags = client.tag(args.run_id, *args.tags, remove=args.remove)
    shown = ", ".join(tags) if tags else "none"
    Console(highlight=False, soft_wrap=True).print(f"run {args.run_id} tags: {shown}")
    return EXIT_OK
