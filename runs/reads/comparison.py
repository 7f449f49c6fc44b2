"""Runs side by side: the results tables of two or more runs as one, a ``run`` column first.

Each run gives the table of the task asked for, or of its one task with a table; the rows
follow run by run in the order the runs were named, the columns in the order first seen (a
column one run lacks is empty in its rows). The combined table is a ``Results`` like any,
so it is filtered, averaged, sorted, paged and plotted as a task's table is; it is kept per
process while its tables are (``COMBINED``), and holds at most ``max_rows`` rows in all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runs.common import store
from runs.common.kept import Kept
from runs.models import FINAL_TASK_STATES, Task
from runs.reads import results as tables
from runs.reads.access import visible_runs

MAX_RUNS = 10
"""Runs compared at once at most: an overlaid plot of more is no longer read."""
KEPT = 16


class NotComparable(ValueError):
    """Runs that cannot be compared as asked; ``field`` names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Compared:
    """The combined table and the task of each run it came from."""

    results: tables.Results
    tasks: list[Task]


def run_ids(raw: Sequence[str]) -> list[str]:
    """The run ids a query names (``runs=a,b`` or ``runs=a&runs=b``), each once, in order."""
    ids = [part.strip() for value in raw for part in value.split(",") if part.strip()]
    ids = list(dict.fromkeys(ids))
    if len(ids) < 2:
        raise NotComparable("runs", "name two runs or more: runs=<id>,<id>")
    if len(ids) > MAX_RUNS:
        raise NotComparable("runs", f"at most {MAX_RUNS} runs at once")
    return ids


def task_with_table(user: Any, run_id: str, task_id: str) -> Task:
    """The task of a run the user may see whose table is compared: ``task_id`` or the run's
    one ended task with a table; ``NotComparable`` naming the run otherwise."""
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise NotComparable("runs", f"no run {run_id[:40]!r}")
    tasks = [t for t in run.tasks.all() if not task_id or t.task_id == task_id]
    found = [
        t
        for t in tasks
        if t.state in FINAL_TASK_STATES
        and tables.table_entry(store.task_folder(t.run_id, t.task_id))
    ]
    if not found:
        which = f"task {task_id!r}" if task_id else "a task"
        raise NotComparable("runs", f"run {run_id} has no {which} with a results table")
    if len(found) > 1:
        names = ", ".join(t.task_id for t in found)
        raise NotComparable("task", f"run {run_id} has tables in tasks {names}: name one")
    return found[0]


COMBINED: Kept[tables.Results] = Kept(KEPT)
"""Combined tables by the tables they came from (the objects, held while kept)."""


def combined(parts: list[tuple[str, tables.Results]]) -> tables.Results:
    """The parts as one table, as kept in ``COMBINED`` or combined now."""
    key = tuple((run_id, id(results)) for run_id, results in parts)
    return COMBINED.get(key, lambda: _combined(parts))


def _combined(parts: list[tuple[str, tables.Results]]) -> tables.Results:
    """The parts combined, holding them: their ids, in the key, stay theirs while it is kept."""
    made = combine(parts)
    made.sources = [results for _, results in parts]
    return made


def compare(user: Any, ids: list[str], task_id: str = "") -> Compared:
    """The tables of the runs named, as one."""
    tasks = [task_with_table(user, run_id, task_id) for run_id in ids]
    parts = []
    for task in tasks:
        try:
            found = tables.read_table(store.task_folder(task.run_id, task.task_id))
        except tables.Unreadable as error:
            raise NotComparable("runs", f"run {task.run_id}: {error}") from None
        if found is None:
            raise NotComparable("runs", f"run {task.run_id} has no results table")
        parts.append((task.run_id, found))
    return Compared(combined(parts), tasks)


def combine(parts: list[tuple[str, tables.Results]]) -> tables.Results:
    """Tables as one: a ``run`` column, then the columns in the order first seen."""
    limits = tables.Limits.from_settings()
    columns = ("run", *dict.fromkeys(c for _, results in parts for c in results.columns))
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for run_id, results in parts:
        place = {c: i for i, c in enumerate(results.columns)}
        for row in results.rows[: max(0, limits.max_rows - len(rows))]:
            rows.append((run_id, *(row[place[c]] if c in place else "" for c in columns[1:])))
        notes += [f"run {run_id}: {note}" for note in results.notes]
        if results.partial:
            notes.append(f"run {run_id}: partial, the units it finished before it ended")
    count = sum(results.count for _, results in parts)
    if len(rows) < count:
        notes.append(f"too large: {count:,} rows in all, showing the first {len(rows):,}")
    made = tables.Results(
        columns,
        rows,
        count,
        all(results.complete for _, results in parts),
        sum(results.size for _, results in parts),
        notes,
    )
    made.numbers = tables.numeric_columns(columns, rows)
    return made
