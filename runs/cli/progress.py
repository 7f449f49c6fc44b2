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

from runs.cli.client_commands import EXIT_OK, EXIT_RUN_FAILED, EXIT_UNAVAILABLE, Client, CliError
from runs.client.errors import no_run
from runs.client.progress import duration_text, gib_text, shown, styled

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


def memory_kills(run: dict[str, Any], told: set[tuple[str, int]]) -> list[str]:
    """A line for each attempt killed for memory not ``told`` yet (added to it): the memory
    it had and the memory of its retry, or that the retry memory was not enough."""
    lines = []
    for task in run["tasks"]:
        retry = task.get("plan", {}).get("retry_memory_gb")
        for attempt in task.get("attempts", []):
            key = (attempt["worker"], attempt["attempt"])
            if not attempt.get("oom_killed") or key in told:
                continue
            told.add(key)
            had = attempt.get("memory_gb")
            killed = f"{attempt['worker']} attempt {attempt['attempt']} was killed for memory"
            killed += f" at {gib_text(had)} GiB" if had else ""
            if retry and (not had or had < retry):
                lines.append(f"{killed}; retried with {gib_text(retry)} GiB")
            else:
                lines.append(f"{killed}, the retry memory: task {task['id']} fails")
    return lines


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
    told: set[tuple[str, int]] = set()
    with shown(console) as show:
        while True:
            run = _poll(client, run_id, sleep)
            for line in memory_kills(run, told):
                console.print(line, highlight=False, markup=False)
            if run["state"] == "learning" and ("learning", 0) not in told:
                told.add(("learning", 0))
                console.print(f"run {run_id} is learning: {run['message']}", markup=False)
            show(run)
            if run["state"] in ENDED:
                return run
            sleep(poll_s)
