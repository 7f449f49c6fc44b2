"""The timeline (Gantt) of a run for the dashboard: a bar per task and one per attempt of it.

Computed on the server, as the DAG is: bars from ``Task.started_at``/``ended_at`` and the
attempts' own times, on one time axis from the run's creation to its end (or now). A time the
record does not have yet is not guessed: a task or attempt without a start has no bar, one
without an end runs to now while its run is live.

It is laid out twice: for a screen, its labels in a column left of the bars; for a phone
(``phone=True``), as narrow as the phone, each label above its bar, so neither is scaled down
to a phone's width (the screen's, at 420 px, drew its labels 4 px tall).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from runs.models import Attempt, Run, Task

LABEL_WIDTH = 170
PLOT_WIDTH = 720
PHONE_PLOT_WIDTH = 340
"""The phone's plot: about the width a 420 px screen leaves the card, so it is drawn at 1:1."""
PHONE_LABEL_ROW = 13
"""The height a label takes above its bar on a phone."""
TASK_ROW = 26
ATTEMPT_ROW = 18
AXIS_HEIGHT = 24
TICKS = 6
TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 4 * 3600, 86400)


@dataclass(frozen=True)
class Bar:
    """One row: a task (``attempt`` None) or an attempt of one, drawn if it has a start."""

    label: str
    kind: str
    state: str
    y: int
    height: int
    x: float | None = None
    width: float = 0.0
    open_ended: bool = False
    title: str = ""
    task_id: str = ""
    label_above: bool = False
    """Whether its label is above its bar (a phone's layout), else left of it."""

    @property
    def label_x(self) -> int:
        return 4 if self.kind == "task" or self.label_above else 18

    @property
    def label_y(self) -> int:
        return self.y + (PHONE_LABEL_ROW - 2 if self.label_above else self.height - 8)

    @property
    def bar_y(self) -> int:
        return self.y + (PHONE_LABEL_ROW if self.label_above else 0) + 4

    @property
    def bar_height(self) -> int:
        return self.height - (PHONE_LABEL_ROW if self.label_above else 0) - 8


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Timeline:
    bars: list[Bar]
    ticks: list[Tick]
    width: int
    height: int
    label_width: int = LABEL_WIDTH
    drawn: int = 0
    """How many rows have a bar: none until a task or attempt has a start."""


def _short(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s" if seconds % 60 else f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _attempt_state(attempt: Attempt) -> str:
    if attempt.oom_killed:
        return "oom"
    if attempt.evicted:
        return "evicted"
    if attempt.exit_code not in (None, 0):
        return "failed"
    if attempt.ended_at is not None or attempt.exit_code == 0:
        return "done"
    return "running"


def _reused_bar(task: Task, y: int, x: float, until: float, phone: bool) -> Bar:
    """The row of a task's units reused from an earlier run: there from the run's creation,
    computed by none of its attempts."""
    title = (
        f"{task.units_reused:,} of {task.units_total:,} units reused from {task.reused_run}: "
        "not computed by this run"
    )
    label = f"reused from {task.reused_run}"
    return Bar(label, "reused", "reused", y, _row(ATTEMPT_ROW, phone), x, max(until - x, 2.0),
               False, title, task.task_id, phone)  # fmt: skip


def _tick_step(span: float) -> int:
    """Seconds between two ticks of an axis ``span`` seconds long: the first step that gives
    at most ``TICKS`` of them; past the last step's, whole multiples of it (a run live for a
    year has a tick every few weeks, not one a day)."""
    found = next((s for s in TICK_STEPS_S if span / s <= TICKS), None)
    return found or math.ceil(span / TICKS / TICK_STEPS_S[-1]) * TICK_STEPS_S[-1]


def _row(height: int, phone: bool) -> int:
    return height + PHONE_LABEL_ROW if phone else height


def timeline(
    run: Run, tasks: Sequence[Task], now: datetime | None = None, *, phone: bool = False
) -> Timeline:
    """Lay the tasks of a run (in spec order) and their attempts on the run's time axis; for
    a phone, narrow, each label above its bar."""
    now = now or timezone.now()
    start = run.created_at
    end = run.ended_at or now
    span = max((end - start).total_seconds(), 1.0)
    left, plot = (12, PHONE_PLOT_WIDTH) if phone else (LABEL_WIDTH, PLOT_WIDTH)
    scale = plot / span

    def x_of(at: datetime) -> float:
        return left + max(0.0, min((at - start).total_seconds(), span)) * scale

    def placed(began: datetime | None, ended: datetime | None) -> tuple[float | None, float, bool]:
        if began is None:
            return None, 0.0, False
        x = x_of(began)
        # Without its end the bar runs to now (or to the run's end): drawn as open-ended.
        return x, max(x_of(ended or end) - x, 2.0), ended is None

    bars: list[Bar] = []
    y = 0
    for task in tasks:
        attempts = list(task.attempts.all())
        began = task.started_at or min(
            (a.started_at for a in attempts if a.started_at), default=None
        )
        x, width, open_ended = placed(began, task.ended_at)
        title = f"{task.task_id}: {task.state}"
        if began is not None:
            title += f", from +{_short((began - start).total_seconds())}"
        bars.append(
            Bar(task.task_id, "task", task.state, y, _row(TASK_ROW, phone), x, width,
                open_ended, title, task.task_id, phone)
        )  # fmt: skip
        y += _row(TASK_ROW, phone)
        if task.units_reused:
            bars.append(_reused_bar(task, y, left, x_of(began or start), phone))
            y += _row(ATTEMPT_ROW, phone)
        for attempt in attempts:
            state = _attempt_state(attempt)
            x, width, open_ended = placed(attempt.started_at, attempt.ended_at)
            label = f"{attempt.worker} #{attempt.attempt}"
            note = f"{label}: {state}" + (
                f", exit {attempt.exit_code}" if attempt.exit_code is not None else ""
            )
            bars.append(
                Bar(label, "attempt", state, y, _row(ATTEMPT_ROW, phone), x, width, open_ended,
                    note, task.task_id, phone)
            )  # fmt: skip
            y += _row(ATTEMPT_ROW, phone)
    ticks = [
        Tick(left + offset * scale, f"+{_short(offset)}")
        for offset in range(0, int(span) + 1, _tick_step(span))
    ]
    return Timeline(
        bars=bars,
        ticks=ticks,
        width=left + plot + (14 if phone else 10),
        height=y + AXIS_HEIGHT,
        drawn=sum(1 for bar in bars if bar.x is not None),
    )
