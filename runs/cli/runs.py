"""``simrun runs``: your latest runs, with their state and progress."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from rich.table import Table

from runs.cli.client_commands import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Client,
    CliError,
    reports_errors,
    tables_console,
)
from runs.cli.progress import styled

NAME = "runs"
HELP = "list your latest runs"
STATES = ["learning", "submitting", "running", "succeeded", "failed", "cancelled"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", action="append", choices=STATES, help="only in this state")
    parser.add_argument("--name", help="only runs whose name contains this")
    parser.add_argument("--owner", help="only the runs of this user (staff)")
    parser.add_argument(
        "--tag", action="append", help="only runs filed under this tag (repeat it: every one)"
    )
    parser.add_argument(
        "--param",
        metavar="NAME[=VALUE]",
        help="only runs with this parameter, or this value of it (a sweep's axis listing or "
        "spanning it, or a setting equal to it)",
    )
    parser.add_argument(
        "--since", metavar="DATE", help="only runs created at or after this date (or time)"
    )
    parser.add_argument(
        "--until",
        metavar="DATE",
        help="only runs created on or before this date (or before this time)",
    )
    parser.add_argument("-n", "--limit", type=int, default=20, help="how many (default 20)")


def until(text: str) -> str:
    """``created_before`` of ``--until``: a date's day is in (its next day's start), a time
    is the bound itself; a text neither is left for the API to name."""
    try:
        day = datetime.date.fromisoformat(text)
    except ValueError:
        return text
    return (day + datetime.timedelta(days=1)).isoformat() if len(text) == 10 else text


@reports_errors
def run(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"page_size": max(1, min(args.limit, 200))}
    if args.state:
        params["state"] = args.state
    if args.name:
        params["name"] = args.name
    if args.owner:
        params["owner"] = args.owner
    if args.tag:
        params["tag"] = args.tag
    if args.param:
        params["param"] = args.param
    if args.since:
        params["created_after"] = args.since
    if args.until:
        params["created_before"] = until(args.until)
    with Client() as client:
        if args.owner:
            me = client.get("/api/me/")
            if not me["is_staff"] and args.owner != me["username"]:
                # The API shows a user only their own runs: the filter would find none.
                raise CliError(
                    f"--owner needs a staff user: {me['username']} sees only their own runs",
                    EXIT_BAD_INPUT,
                )
        page = client.get("/api/runs/", **params)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("run", "name", "state", "units", "duration", "owner", "created"):
        table.add_column(column)
    for item in page["results"]:
        table.add_row(
            item["id"],
            item["name"],
            styled(item["state"]),
            f"{item['units_done']}/{item['units_total']}",
            f"{item['duration_s']:.0f}s",
            item["owner"],
            item["created_at"][:19].replace("T", " "),
        )
    console = tables_console()
    if page["results"]:
        console.print(table)
    else:
        console.print("no runs")
    more = "+" if not page["count_exact"] else ""
    console.print(f"[dim]{len(page['results'])} of {page['count']}{more}[/]")
    return EXIT_OK
