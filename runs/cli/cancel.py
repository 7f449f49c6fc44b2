"""``simrun cancel RUN``: cancel a run; its processes are stopped."""

from __future__ import annotations

import argparse

from rich.console import Console

from runs.cli.client_commands import EXIT_OK, Client, reports_errors

NAME = "cancel"
HELP = "cancel a run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id")


@reports_errors
def run(args: argparse.Namespace) -> int:
    with Client() as client:
        cancelled = client.cancel(args.run_id)
    Console(highlight=False, soft_wrap=True).print(f"run {cancelled.id} {cancelled.state}")
    return EXIT_OK
