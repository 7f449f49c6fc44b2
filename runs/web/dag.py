"""The layout of a run's DAG for the dashboard: boxes in columns by depth, arrows for inputs.

Computed on the server so the page needs no drawing library: a task's column is the length of
the longest chain of inputs leading to it, its row its order among the tasks of that column.

A phone gets a layout of its own (``phone=True``), one box a row, by depth then spec order,
the arrows routed along their right side: columns side by side put a chain's third task off
a 420 px screen, and scaled to fit, the boxes' words would be too small to read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runs.models import Task

BOX_WIDTH = 170
BOX_HEIGHT = 58
COLUMN_GAP = 70
ROW_GAP = 22
MARGIN = 12
PHONE_BOX_WIDTH = 250
PHONE_ROW_GAP = 16
PHONE_ARROW_ROOM = 70
"""The width right of a phone's boxes where the arrows run."""


@dataclass(frozen=True)
class Box:
    task: Task
    x: int
    y: int
    units_done: int

    width: int = BOX_WIDTH
    height: int = BOX_HEIGHT

    @property
    def progress_width(self) -> int:
        """The width of the progress bar inside the box."""
        total = self.task.units_total
        inner = self.width - 20
        return 0 if total <= 0 else round(inner * min(self.units_done, total) / total)


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    port: str
    path: str


@dataclass(frozen=True)
class Layout:
    boxes: list[Box]
    arrows: list[Arrow]
    width: int
    height: int


def depths(tasks: Sequence[Task]) -> dict[str, int]:
    """The column of each task: 0 without inputs, else one more than its deepest input."""
    inputs = {t.task_id: [s for s in t.inputs.values() if s != t.task_id] for t in tasks}
    found: dict[str, int] = {}

    def depth(task_id: str, seen: frozenset[str]) -> int:
        if task_id in found:
            return found[task_id]
        sources = [s for s in inputs.get(task_id, []) if s in inputs and s not in seen]
        value = 1 + max((depth(s, seen | {task_id}) for s in sources), default=-1)
        found[task_id] = value
        return value

    for task in tasks:
        depth(task.task_id, frozenset())
    return found


def layout(
    tasks: Sequence[Task], units_done: dict[str, int] | None = None, *, phone: bool = False
) -> Layout:
    """Place the tasks (in spec order) and route an arrow for every input; for a phone, one
    below the other (``phone_layout``)."""
    if phone:
        return phone_layout(tasks, units_done)
    columns = depths(tasks)
    rows: dict[int, int] = {}
    boxes: dict[str, Box] = {}
    for task in tasks:
        column = columns[task.task_id]
        row = rows.get(column, 0)
        rows[column] = row + 1
        boxes[task.task_id] = Box(
            task=task,
            x=MARGIN + column * (BOX_WIDTH + COLUMN_GAP),
            y=MARGIN + row * (BOX_HEIGHT + ROW_GAP),
            units_done=(units_done or {}).get(task.task_id, task.units_done),
        )
    arrows = []
    for task in tasks:
        target = boxes[task.task_id]
        for port, source_id in sorted(task.inputs.items()):
            source = boxes.get(source_id)
            if source is None or source_id == task.task_id:
                continue
            x1, y1 = source.x + source.width, source.y + source.height // 2
            x2, y2 = target.x - 6, target.y + target.height // 2
            bend = max(20, (x2 - x1) // 2)
            path = f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
            arrows.append(Arrow(source_id, task.task_id, port, path))
    width = MARGIN * 2 + (max(columns.values(), default=0) + 1) * (BOX_WIDTH + COLUMN_GAP)
    height = MARGIN * 2 + max(rows.values(), default=1) * (BOX_HEIGHT + ROW_GAP) - ROW_GAP
    return Layout(list(boxes.values()), arrows, width - COLUMN_GAP, height)


def phone_layout(tasks: Sequence[Task], units_done: dict[str, int] | None = None) -> Layout:
    """One box a row, by depth then spec order, so a source is always above what reads it; an
    arrow leaves its source's right side and bends right, further the more rows it spans,
    into its target's right side."""
    columns = depths(tasks)
    order = sorted(tasks, key=lambda t: columns[t.task_id])  # sorted() keeps the spec order
    boxes = {
        task.task_id: Box(
            task=task,
            x=MARGIN,
            y=MARGIN + row * (BOX_HEIGHT + PHONE_ROW_GAP),
            units_done=(units_done or {}).get(task.task_id, task.units_done),
            width=PHONE_BOX_WIDTH,
        )
        for row, task in enumerate(order)
    }
    arrows = []
    for task in order:
        target = boxes[task.task_id]
        for port, source_id in sorted(task.inputs.items()):
            source = boxes.get(source_id)
            if source is None or source_id == task.task_id:
                continue
            x = source.x + source.width
            y1, y2 = source.y + source.height // 2 + 6, target.y + target.height // 2 - 6
            rows = (target.y - source.y) // (BOX_HEIGHT + PHONE_ROW_GAP)
            bend = min(PHONE_ARROW_ROOM - 8, 18 + 12 * rows)
            path = f"M{x},{y1} C{x + bend},{y1} {x + bend},{y2} {x + 6},{y2}"
            arrows.append(Arrow(source_id, task.task_id, port, path))
    height = MARGIN * 2 + len(order) * (BOX_HEIGHT + PHONE_ROW_GAP) - PHONE_ROW_GAP
    return Layout(list(boxes.values()), arrows, MARGIN + PHONE_BOX_WIDTH + PHONE_ARROW_ROOM, height)
