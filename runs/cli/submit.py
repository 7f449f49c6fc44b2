"""``simrun submit FILE [--follow]``: submit a run, uploading the source trees it names.

A spec's ``sources`` may name local folders (relative to the spec file) instead of snapshot
ids: each is packed, uploaded once (the server keeps it under its sha256) and replaced by its
id, so a user runs their working copy without building an image. ``--rerun RUN`` submits the
spec of an earlier run again (or FILE, an edit of it), the new run linked to it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from runs.cli.client import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Client,
    CliError,
    no_run,
    reports_errors,
    run_url,
)
from runs.cli.packing import pack
from runs.cli.progress import follow, stopped_following

NAME = "submit"
HELP = "submit a run from a YAML or JSON file, or again (--rerun RUN); --follow: until it ends"
SNAPSHOT_ID = re.compile(r"^[0-9a-f]{64}$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        type=Path,
        nargs="?",
        help="the run specification (YAML or JSON); with --rerun, the spec to use instead",
    )
    parser.add_argument(
        "--rerun",
        metavar="RUN",
        help="submit the spec of run RUN again (or FILE), as a re-run linked to RUN",
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="show progress until the run ends"
    )


def local_sources(document: Any) -> list[tuple[int, str]]:
    """The entries of ``sources`` that are paths, not snapshot ids, with their index."""
    if not isinstance(document, dict) or not isinstance(document.get("sources"), list):
        return []
    return [
        (i, s)
        for i, s in enumerate(document["sources"])
        if isinstance(s, str) and not SNAPSHOT_ID.match(s)
    ]


def upload_sources(client: Client, document: dict[str, Any], base: Path, console: Console) -> None:
    """Pack and upload every local source tree; replace it by its snapshot id."""
    for index, entry in local_sources(document):
        folder = (base / entry).resolve()
        if not folder.is_dir():
            raise CliError(f"sources.{index}: {entry!r} is no folder ({folder})", EXIT_BAD_INPUT)
        archive = pack(folder)
        response = client.post(
            "/api/snapshots/",
            params={"name": folder.name},
            content=archive,
            headers={"Content-Type": "application/gzip"},
        )
        snapshot = response.json()
        console.print(
            f"uploaded {entry} ({len(archive) // 1024} KiB) as snapshot {snapshot['id'][:12]}",
            highlight=False,
        )
        document["sources"][index] = snapshot["id"]


def submit(
    client: Client, path: Path | None, console: Console, *, rerun: str | None = None
) -> dict[str, Any]:
    """Submit the spec of a file (or re-run a run); the run as the server returned it."""
    endpoint = "/api/runs/" if rerun is None else f"/api/runs/{rerun}/rerun/"
    missing = no_run(rerun) if rerun else ""
    if path is None:
        response = client.post(endpoint, missing=missing)
        return dict(response.json())
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {path}: {error}", EXIT_BAD_INPUT) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        document = None  # the server says what is wrong, by the path of the field
    body, content_type = text.encode(), "application/yaml"
    if local_sources(document):
        upload_sources(client, document, path.parent, console)
        body, content_type = json.dumps(document).encode(), "application/json"
    try:
        response = client.post(
            endpoint, missing=missing, content=body, headers={"Content-Type": content_type}
        )
    except CliError as error:
        if not error.problems:
            raise
        message = f"{path} is not a valid run specification:\n{error.problems}"
        raise CliError(message, EXIT_BAD_INPUT) from None
    return dict(response.json())


@reports_errors
def run(args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True)
    if args.file is None and args.rerun is None:
        raise CliError("give the spec FILE to submit, or --rerun RUN", EXIT_BAD_INPUT)
    with Client() as client:
        created = submit(client, args.file, console, rerun=args.rerun)
        label = f" ({created['name']})" if created.get("name") else ""
        again = f" as a re-run of {args.rerun}" if args.rerun else ""
        try:  # from the moment the run exists, Ctrl-C leaves it running and says so
            console.print(
                f"submitted run {created['id']}{label}{again}: "
                f"{run_url(client.config, created['id'])}"
            )
            return follow(client, created["id"], console) if args.follow else EXIT_OK
        except KeyboardInterrupt:
            return stopped_following(created["id"], console)
