"""``alloc``: each unit allocates and touches ``mb`` MiB: the tool for memory tests."""

from __future__ import annotations

import json
import time

from pydantic import BaseModel, Field

from harness.tasktypes import MergeContext, TaskType

PAGE = 4096


class AllocSettings(BaseModel):
    """``units`` units, each holding ``mb`` MiB of touched memory for ``hold_s`` seconds."""

    units: int = Field(ge=1, le=100_000)
    mb: int = Field(ge=0, le=1_048_576, description="MiB each unit allocates and touches")
    hold_s: float = Field(default=0.0, ge=0, le=3600)


def units(settings: AllocSettings) -> int:
    return settings.units


def compute(settings: AllocSettings, context: None, index: int) -> int:
    block = bytearray(settings.mb * 1024 * 1024)
    for offset in range(0, len(block), PAGE):
        block[offset] = 1
    if settings.hold_s:
        time.sleep(settings.hold_s)
    del block
    return index


def merge(settings: AllocSettings, context: MergeContext) -> None:
    done = sorted(context.results)
    (context.out / "alloc.json").write_text(json.dumps({"units_done": done, "mb": settings.mb}))


TASK_TYPE = TaskType(
    name="alloc",
    settings=AllocSettings,
    units=units,
    compute=compute,
    merge=merge,
    base_gb=0.1,
    per_worker_gb=0.25,
    description="each unit allocates and touches mb MiB for hold_s seconds",
)
