"""``squares``: unit ``i`` computes ``i*i``; the smallest sweep, for demos and tests."""

from __future__ import annotations

import csv
import json
import time

from pydantic import BaseModel, Field

from harness.tasktypes import MergeContext, TaskType


class SquaresSettings(BaseModel):
    """``n`` units; each sleeps ``delay_s`` before it squares its index; ``fail_unit`` raises."""

    n: int = Field(ge=1, le=10_000_000, description="number of units")
    delay_s: float = Field(default=0.0, ge=0, le=3600, description="seconds each unit sleeps")
    fail_unit: int | None = Field(
        default=None, ge=0, description="a unit that raises, to show how a failure looks"
    )


def units(settings: SquaresSettings) -> int:
    return settings.n


def compute(settings: SquaresSettings, context: None, index: int) -> int:
    if settings.delay_s:
        time.sleep(settings.delay_s)
    if index == settings.fail_unit:
        raise RuntimeError(f"unit {index} fails as its settings ask (fail_unit)")
    return index * index


def merge(settings: SquaresSettings, context: MergeContext) -> None:
    squares = list(context.results)
    (context.out / "squares.json").write_text(json.dumps(squares))
    with (context.out / "squares.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["unit", "square"])
        writer.writerows(enumerate(squares))


TASK_TYPE = TaskType(
    name="squares",
    settings=SquaresSettings,
    units=units,
    compute=compute,
    merge=merge,
    base_gb=0.1,
    per_worker_gb=0.1,
    description="unit i computes i*i; writes out/squares.json and out/squares.csv",
)
