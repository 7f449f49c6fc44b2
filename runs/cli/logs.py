"""``simrun logs RUN TASK [-f]``: the logs of a task's processes; ``-f`` follows them.

Each log is one attempt of one pod (process): ``<node>-<attempt>``. Following picks up the
logs of attempts that start later (a retry) and ends once the task is final and no log runs.
"""

from __future__ import annotations

import argparse
import difflib
import time
from typing import Any

from rich.console import Console

from runs.cli.client_commands import EXIT_BAD_INPUT, EXIT_OK, Client, CliError, reports_errors
from runs.client.errors import no_run

NAME = "logs"
HELP = "print the logs of a task (-f: follow them)"
FINAL_TASK_STATES = frozenset({"done", "failed", "skipped"})
POLL_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id")
    parser.add_argument("task", help="the task's id")
    parser.add_argument("-f", "--follow", action="store_true", help="follow while they grow")
    parser.add_argument("--log", help="only this log, <node>-<attempt> (default: all)")
    parser.add_argument("-n", "--tail", type=int, default=200, help="lines from the end first")


class LogPrinter:
    """Prints the text of several logs, each line prefixed by its log when there are several."""

    def __init__(
        self, client: Client, base: str, console: Console, tail: int, missing: str = ""
    ) -> None:
        self.client, self.base, self.console = client, base, console
        self.missing = missing
        self.tail = max(1, min(tail, 5000))
        self.offsets: dict[str, int] = {}

    def logs(self, only: str | None) -> list[dict[str, Any]]:
        found = list(self.client.get(f"{self.base}/logs/", missing=self.missing))
        if only is not None:
            found = [log for log in found if log["name"] == only]
            if not found:
                raise CliError(f"no log {only!r} (see `simrun logs RUN TASK`)", EXIT_BAD_INPUT)
        return found

    def read(self, name: str, prefix: bool) -> None:
        """Print what is new in a log: its tail the first time, then what follows."""
        while True:
            if name in self.offsets:
                part = self.client.get(f"{self.base}/logs/{name}/", offset=self.offsets[name])
            else:
                part = self.client.get(f"{self.base}/logs/{name}/", tail=self.tail)
            self.offsets[name] = part["offset"]
            text = part["text"]
            if not text:
                return
            for line in text.splitlines():
                self.console.print(f"[{name}] {line}" if prefix else line, markup=False)
            if part.get("running") or len(text) < 512 * 1024:
                return


def known_task(client: Client, run_id: str, task: str) -> None:
    """Refuse a task the run does not have, naming the closest of those it has (``swep``:
    did you mean ``sweep``?); a run the user may not see is the server's 404."""
    tasks = [t["id"] for t in client.get(f"/api/runs/{run_id}/", missing=no_run(run_id))["tasks"]]
    if task in tasks:
        return
    close = difflib.get_close_matches(task, tasks, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise CliError(
        f"not found: run {run_id!r} has no task {task!r} ({hint}its tasks: {', '.join(tasks)})",
        EXIT_BAD_INPUT,
    )


@reports_errors
def run(args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True)
    with Client() as client:
        known_task(client, args.run_id, args.task)
        base = f"/api/runs/{args.run_id}/tasks/{args.task}"
        missing = f"not found: no task {args.task!r} in a run {args.run_id!r} you may see"
        printer = LogPrinter(client, base, console, args.tail, missing)
        if not args.follow:
            logs = printer.logs(args.log)
            for log in logs:
                if len(logs) > 1:
                    console.print(f"==> {log['name']} <==", markup=False)
                printer.read(log["name"], prefix=False)
            if not logs:
                console.print("no logs yet")
            return EXIT_OK
        while True:
            final = client.get(f"{base}/", missing=missing)["state"] in FINAL_TASK_STATES
            logs = printer.logs(args.log)
            for log in logs:
                printer.read(log["name"], prefix=len(logs) > 1 and not args.log)
            if final and not any(log["running"] for log in logs):
                return EXIT_OK
            time.sleep(POLL_S)
