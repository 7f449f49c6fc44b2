"""``simrun submit FILE [--follow]``: submit a run, uploading the source trees it names.

A spec's ``sources`` may name local folders (relative to the spec file) instead of snapshot
ids: each is packed, uploaded once (the server keeps it under its sha256) and replaced by its
id, so a user runs their working copy without building an image. ``--rerun RUN`` submits the
spec of an earlier run again (or FILE, an edit of it), the new run linked to it; ``--resume
RUN`` does so reusing every task and unit RUN finished (docs/resume.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from runs.cli.client_commands import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Client,
    CliError,
    as_cli_errors,
    reports_errors,
    run_url,
)
from runs.cli.progress import follow, stopped_following

NAME = "submit"
HELP = (
    "submit a run from a YAML or JSON file, or again (--rerun RUN), reusing what it finished "
    "(--resume RUN); --follow: until it ends"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        type=Path,
        nargs="?",
        help="the run specification (YAML or JSON); with --rerun or --resume, the spec to "
        "use instead",
    )
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--rerun",
        metavar="RUN",
        help="submit the spec of run RUN again (or FILE), as a re-run linked to RUN",
    )
    again.add_argument(
        "--resume",
        metavar="RUN",
        help="resume the ended run RUN: its spec again (or FILE), reusing every task and unit "
        "it finished that is unchanged",
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="show progress until the run ends"
    )


def submit(
    client: Client,
    path: Path | None,
    console: Console,
    *,
    rerun: str | None = None,
    resume: str | None = None,
) -> dict[str, Any]:
    """Submit the spec of a file (or re-run or resume a run); the run as the server
    returned it."""
    text = None
    if path is not None:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise CliError(f"cannot read {path}: {error}", EXIT_BAD_INPUT) from None
    try:
        with as_cli_errors():
            return client.submit_text(
                text,
                base=path.parent if path is not None else Path.cwd(),
                rerun=rerun,
                resume=resume,
                report=lambda line: console.print(line, highlight=False),
                name=str(path or ""),
            )
    except CliError as error:
        if not error.problems or path is None:
            raise
        message = f"{path} is not a valid run specification:\n{error.problems}"
        raise CliError(message, EXIT_BAD_INPUT) from None


@reports_errors
def run(args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True)
    if args.file is None and args.rerun is None and args.resume is None:
        raise CliError("give the spec FILE to submit, --rerun RUN or --resume RUN", EXIT_BAD_INPUT)
    with Client() as client:
        created = submit(client, args.file, console, rerun=args.rerun, resume=args.resume)
        label = f" ({created['name']})" if created.get("name") else ""
        again = f" as a re-run of {args.rerun}" if args.rerun else ""
        again = f" resuming {args.resume}" if args.resume else again
        try:  # from the moment the run exists, Ctrl-C leaves it running and says so
            console.print(
                f"submitted run {created['id']}{label}{again}: "
                f"{run_url(client.config, created['id'])}"
            )
            return follow(client, created["id"], console) if args.follow else EXIT_OK
        except KeyboardInterrupt:
            return stopped_following(created["id"], console)
