"""Follow a run until it ends: progress bars per task on a terminal, a line per change otherwise.

The exit code is 0 only when the run succeeded, so a script can ``simrun submit --follow``.
The elapsed time is the run's own (the server's ``duration_s``, from its creation), not the
follower's; Ctrl-C stops following only: the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from runs.cli.client import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_UNAVAILABLE,
    Client,
    CliError,
    no_run,
)
from runs.client.progress import duration_text, shown, styled

__all__ = ["duration_text", "follow", "styled"]

ENDED = frozenset({"succeeded", "failed", "cancelled"})
POLL_S = 1.0
OUTAGE_S = 60.0
"""How long a follower waits for a server that stopped answering before it gives up."""


def _poll(client: Client, run_id: str, sleep: Callable[[float], None]) -> dict[str, Any]:
    """The run now; a server that stops answering for a while is waited for."""
    deadline = time.monotonic() + OUTAGE_S
    while True:
        try:
            return dict(client.get(f"/api/runs/{run_id}/", missing=no_run(run_id)))
        except CliError as error:
            if error.code != EXIT_UNAVAILABLE or time.monotonic() > deadline:
                raise
            sleep(POLL_S)


EXIT_INTERRUPTED = 130
"""Ctrl-C: the follower stopped, as a shell's 128 + SIGINT."""


def follow(
    client: Client,
    run_id: str,
    console: Console,
    *,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Show the progress of a run until it ends; 0 when it succeeded."""
    try:
        run = _follow(client, run_id, console, poll_s=poll_s, sleep=sleep)
    except KeyboardInterrupt:
        return stopped_following(run_id, console)
    state = run["state"]
    summary = f"run {run_id} {styled(state)} after {duration_text(run.get('duration_s') or 0)}"
    if run.get("message"):
        summary += f": {run['message']}"
    console.print(summary)
    return EXIT_OK if state == "succeeded" else EXIT_RUN_FAILED


def stopped_following(run_id: str, console: Console) -> int:
    """After Ctrl-C: say that the run goes on and how to cancel it."""
    console.print(
        f"stopped following run {run_id}; the run goes on "
        f"(see it with `simrun show {run_id}`, cancel it with `simrun cancel {run_id}`)"
    )
    return EXIT_INTERRUPTED


def _follow(
    client: Client,
    run_id: str,
    console: Console,
    *,
    poll_s: float,
    sleep: Callable[[float], None],
) -> dict[str, Any]:
    """Poll and show a run until it ends; the run as last polled."""
    with shown(console) as show:
        while True:
            run = _poll(client, run_id, sleep)
            show(run)
            if run["state"] in ENDED:
                return run
            sleep(poll_s)
