"""``simrun show RUN``: a run with its tasks, plans, attempts and message."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from rich.table import Table

from runs.cli.client_commands import EXIT_OK, Client, reports_errors, run_url, tables_console
from runs.cli.progress import duration_text, styled
from runs.client.errors import no_run
from runs.client.progress import gib_text

NAME = "show"
HELP = "show a run: its tasks, plans, attempts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id")
    parser.add_argument(
        "--why", action="store_true", help="print the arithmetic of each task's plan too"
    )


def tasks_table(tasks: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("task", "kind", "state", "units", "cores", "memory", "workers", "why"):
        table.add_column(column, overflow="fold")
    for task in tasks:
        plan = task["plan"]
        table.add_row(
            task["id"],
            task["type"] or task["kind"],
            styled(task.get("shown_state") or task["state"]),
            f"{task['units_done']}/{task['units_total']}" + failed_text(task.get("units_failed")),
            str(plan["cores"]),
            f"{gib_text(plan['memory_gb'])} GiB",
            str(plan.get("workers", 1)),
            plan.get("why_short") or plan.get("why", ""),
        )
    return table


def failed_text(failed: int | None) -> str:
    """The count of failed units beside a progress, nothing when none failed."""
    return f" ({failed} failed)" if failed else ""


def failed_line(task: dict[str, Any]) -> str:
    """How many units of a task failed and the first one's why, in a line; "" for none."""
    if not task.get("units_failed"):
        return ""
    why = f"; the first: {task['unit_failure']}" if task.get("unit_failure") else ""
    return f"{task['id']}: {task['units_failed']} of {task['units_total']} units failed{why}"


def reused_line(task: dict[str, Any]) -> str:
    """What a task reused of an earlier run's, or why it did not, in a line (docs/resume.md)."""
    source = task.get("reused_from")
    if source:
        units = task.get("units_reused", 0)
        if str(task.get("shown_state", "")).startswith("reused from "):
            return f"{task['id']}: reused from {source['run']} (its task {source['task']})"
        return (
            f"{task['id']}: {units}/{task['units_total']} units reused from {source['run']} "
            f"(its task {source['task']}), the others computed by this run"
        )
    return f"{task['id']}: {task['not_reused']}" if task.get("not_reused") else ""


def plans_why(tasks: list[dict[str, Any]]) -> list[str]:
    """The arithmetic of each task's plan, below the table whose column says it plainly."""
    return [
        f"{task['id']}: {task['plan']['why']}"
        for task in tasks
        if task["plan"].get("why_short") and task["plan"].get("why")
    ]


def memory_kill(attempt: dict[str, Any]) -> str:
    """How an attempt was killed for memory, with the evidence when it says more than that."""
    if not attempt["oom_killed"]:
        return ""
    evidence = attempt["oom_evidence"]
    detail = f" ({evidence})" if evidence and evidence != "OOMKilled" else ""
    return f"[red]OOM killed[/]{detail}"


def attempts_table(tasks: list[dict[str, Any]]) -> Table | None:
    """Every attempt from the moment it runs: where, since when, how long, its measured peak
    beside the limit it had, and how it ended."""
    rows = [(t["id"], a) for t in tasks for a in t["attempts"]]
    if not rows:
        return None
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ("task", "worker", "attempt", "phase", "node", "started", "duration", "exit")
    for column in (*columns, "peak / limit", "memory kill"):
        table.add_column(column)
    for task_id, attempt in rows:
        kill = memory_kill(attempt)
        table.add_row(
            task_id,
            attempt["worker"],
            str(attempt["attempt"]),
            "[cyan]Running[/]" if attempt.get("running") else attempt["phase"],
            attempt["node_name"],
            started(attempt.get("started_at")),
            lasted(attempt),
            "" if attempt["exit_code"] is None else str(attempt["exit_code"]),
            peak_of(attempt),
            kill + (" evicted" if attempt["evicted"] else ""),
        )
    return table


def started(at: str | None) -> str:
    """The start of an attempt as the server wrote it, to the second (date and time)."""
    return "" if not at else at[:19].replace("T", " ")


def lasted(attempt: dict[str, Any]) -> str:
    seconds = attempt.get("duration_s")
    if seconds is None:
        return ""
    return duration_text(seconds) + (" so far" if attempt.get("running") else "")


def peak_of(attempt: dict[str, Any]) -> str:
    """``<peak> / <limit> GiB``: the peak measured (so far, while it runs) beside its limit."""
    peak, limit = attempt.get("peak_bytes"), attempt.get("memory_gb")
    shown = "–" if peak is None else f"{peak / 2**30:.2f}"
    return f"{shown} / {limit:g} GiB" if limit else ("" if peak is None else f"{shown} GiB")


@reports_errors
def run(args: argparse.Namespace) -> int:
    with Client() as client:
        item = client.get(f"/api/runs/{args.run_id}/", missing=no_run(args.run_id))
        url = run_url(client.config, item["id"])
    console = tables_console()
    title = f"{item['name']} " if item["name"] else ""
    state = item.get("shown_state") or item["state"]
    console.print(f"[bold]{title}{item['id']}[/] {styled(state)}  {url}")
    console.print(
        f"by {item['owner']} · {item['backend']} backend · created {item['created_at'][:19]} · "
        f"{item['units_done']}/{item['units_total']} units"
        f"{failed_text(item.get('units_failed'))} · "
        f"{duration_text(item['duration_s'] or 0)}"
    )
    if item.get("resume_of"):
        console.print(f"resumes {item['resume_of']}: reuses what it finished")
    elif item.get("rerun_of"):
        console.print(f"re-run of {item['rerun_of']}")
    if item.get("reruns"):
        console.print(f"re-run as {', '.join(item['reruns'])}")
    if item["message"]:
        console.print(f"message: {item['message']}")
    if item.get("tags"):
        console.print(f"tags: {', '.join(item['tags'])}", markup=False)
    if item.get("note"):
        console.print(f"note: {item['note']}", markup=False)
    console.print(tasks_table(item["tasks"]))
    for line in plans_why(item["tasks"]) if getattr(args, "why", False) else []:
        console.print(line, markup=False)
    for task in item["tasks"]:
        if task.get("command"):
            console.print(f"command of {task['id']}: {shlex.join(task['command'])}", markup=False)
        if task.get("message"):  # why it waits, or why it failed
            console.print(f"{task['id']}: {task['message']}", markup=False)
        if line := failed_line(task):
            console.print(line, markup=False)
        if line := reused_line(task):
            console.print(line, markup=False)
    attempts = attempts_table(item["tasks"])
    if attempts is not None:
        console.print(attempts)
    return EXIT_OK
