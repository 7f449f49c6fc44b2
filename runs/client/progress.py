"""Showing a run's progress while it is followed: where it is shown decides how.

A terminal gets a bar per task redrawn in place (rich), a Jupyter notebook a table of bars
redrawn in its output cell (IPython's display handles, so no ipywidgets), anything else
(a pipe, a log file) a line per task whose state or units changed.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

STATE_STYLE = {
    "succeeded": "green",
    "done": "green",
    "failed": "red",
    "cancelled": "yellow",
    "running": "blue",
    "preempted": "dark_orange",
    "retrying": "dark_orange",
}
HTML_COLOUR = {"green": "#1a7f37", "red": "#cf222e", "yellow": "#9a6700", "blue": "#0969da"}

Show = Callable[[dict[str, Any]], None]
"""Shows the tasks of a run as polled."""


def styled(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{state}[/]" if style else state


def gib_text(gib: float) -> str:
    """A memory figure in GiB to the hundredth, as short as it reads: ``23.54``, ``2``."""
    return f"{round(gib, 2):g}"


def size_text(size: int) -> str:
    """A size as a person reads it: ``512 B``, ``3.4 KiB``, ``12.0 MiB``, never ``0 KiB``."""
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def duration_text(seconds: float) -> str:
    """Seconds as a person reads them: ``42s``, ``3m 07s``, ``2h 05m``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return (
        f"{hours}h {minutes:02d}m"
        if hours
        else f"{minutes}m {secs:02d}s"
        if minutes
        else f"{secs}s"
    )


@contextmanager
def shown(console: Console, display: Callable[..., Any] | None = None) -> Iterator[Show]:
    """How to show a run's progress on ``console``: bars, a notebook table or lines.

    ``display`` is IPython's, found when the console is a notebook's (given, for tests).
    """
    if display is None and console.is_jupyter:
        from IPython.display import display as ipython_display  # wherever rich finds Jupyter

        display = ipython_display
    if display is not None:
        yield NotebookTable(display)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[state]}"),
        TextColumn("{task.fields[elapsed]}", style="progress.elapsed"),
    )
    with Progress(*columns, console=console, disable=not console.is_terminal) as bars:
        yield _bars(bars) if console.is_terminal else _lines(console)


def _lines(console: Console) -> Show:
    """A line per task whose state or units changed: for a pipe or a log file."""
    seen: dict[str, tuple[str, int, int]] = {}

    def show(run: dict[str, Any]) -> None:
        for task in run["tasks"]:
            now = (task["state"], task["units_done"], task["units_total"])
            if seen.get(task["id"]) != now:
                seen[task["id"]] = now
                console.print(
                    f"{task['id']:<20} {task['state']:<10} "
                    f"{task['units_done']}/{task['units_total']} units",
                    highlight=False,
                    markup=False,
                )

    return show


def _bars(bars: Progress) -> Show:
    """A bar per task, redrawn in place: for a terminal."""
    rows: dict[str, TaskID] = {}

    def show(run: dict[str, Any]) -> None:
        elapsed = duration_text(run.get("duration_s") or 0)
        for task in run["tasks"]:
            if task["id"] not in rows:
                rows[task["id"]] = bars.add_task(
                    task["id"], total=task["units_total"] or 1, state="", elapsed=elapsed
                )
            bars.update(
                rows[task["id"]],
                completed=task["units_done"],
                total=task["units_total"] or 1,
                state=styled(task["state"]),
                elapsed=elapsed,
            )

    return show


class NotebookTable:
    """A table of a bar per task in a notebook's output cell, replaced at every poll."""

    def __init__(self, display: Callable[..., Any]) -> None:
        self.display = display
        self.handle: Any = None

    def __call__(self, run: dict[str, Any]) -> None:
        bundle = notebook_bundle(run)
        if self.handle is None:
            self.handle = self.display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)


def notebook_bundle(run: dict[str, Any]) -> dict[str, str]:
    """A run's progress as HTML for a notebook, with a plain text version for other front-ends."""
    elapsed = duration_text(run.get("duration_s") or 0)
    title = f"{run.get('name') or ''} {run.get('id', '')}".strip()
    text = [f"run {title} {run['state']} · {elapsed}"]
    rows = []
    for task in run["tasks"]:
        done, total = task["units_done"], task["units_total"]
        text.append(f"{task['id']:<20} {task['state']:<10} {done}/{total} units")
        colour = HTML_COLOUR.get(STATE_STYLE.get(task["state"], ""), "inherit")
        rows.append(
            f"<tr><td style='text-align:left'>{html.escape(task['id'])}</td>"
            f"<td><progress value='{done}' max='{total or 1}' style='width:16em'></progress></td>"
            f"<td style='text-align:right'>{done}/{total}</td>"
            f"<td style='text-align:left;color:{colour}'>{html.escape(task['state'])}</td></tr>"
        )
    colour = HTML_COLOUR.get(STATE_STYLE.get(run["state"], ""), "inherit")
    page = (
        f"<div><b>{html.escape(title)}</b> "
        f"<span style='color:{colour}'>{html.escape(run['state'])}</span> · {elapsed}"
        f"<table>{''.join(rows)}</table></div>"
    )
    return {"text/plain": "\n".join(text), "text/html": page}
