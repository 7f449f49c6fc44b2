"""The copy of reused work into a new run's tasks, before its workflow is submitted.

A task that reuses an earlier one (``Task.reuse``, chosen at submission by
``runs.planning.resume``) is copied once, by the run's submission (a Celery worker, never a web
request): the outputs of a task done at once (``out/``), or the done units of a split task that
goes on (the pieces of its ledger whose checksum holds, into ``units/reused/``, and the folders
a command sweep's units wrote, ``out/units/<unit>/``).

What the earlier task left is read as a task could have left it (``runs.control.copying``):
a link, a FIFO, a device, a file with a second name or more than the run's budget refuses that
task's reuse, with the reason (``Task.not_reused``): it runs in full, and nothing was followed.
What is copied is the service's own, staged in a hidden folder of the new task's and renamed
into place; the folders its own workers write into are handed to the run's task user. What
the copies take on disk counts against their owner's budget, with those of the owner's other
live runs (``copy_ledger``).
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from django.utils import timezone

from harness import untrusted
from harness.pieces import (
    ORIGINS,
    ORIGINS_CAP,
    PIECE_FOLDERS,
    REUSED,
    piece_intact,
    piece_units,
)
from harness.sweep import SWEEP_TYPE
from runs.backends.base import Backend, TaskFolders
from runs.common import store
from runs.common.store import TaskFolder
from runs.control import copy_ledger
from runs.control.copying import (
    DIR_MODE,
    FILE_MODE,
    Budget,
    Refused,
    copy_dir,
    copy_tree,
    kind,
    listed,
    read_whole,
    source_dir,
)
from runs.models import Reuse, Run, RunState, Task, TaskState

log = logging.getLogger(__name__)

LEDGER_CAP = 4096
"""The most read of an earlier task's ``units/ledger.json``."""
STAGE_PREFIX = ".reuse-"


def copy_reused(run: Run, tasks: Sequence[Task], *, backend: Backend) -> bool:
    """Copy what the tasks of a submitting run reuse, each once (a resumed submission skips
    the tasks copied before), updating the rows and ``tasks``; False when the run stopped
    submitting meanwhile (a cancel)."""
    if not any(task.reuse and task.units_reused is None for task in tasks):
        return True
    with copy_ledger.owners_budget(run) as budget:
        return _copy_each(run, tasks, backend, budget)


def _copy_each(run: Run, tasks: Sequence[Task], backend: Backend, budget: Budget) -> bool:
    """Copy each task's reused work within the owner's ``budget`` (``copy_reused``)."""
    for task in tasks:
        if not task.reuse or task.units_reused is not None:
            continue
        spent = budget.bytes, budget.files
        try:
            fields = _copy(run, task, budget, backend)
        except Refused as why:
            budget.bytes, budget.files = spent
            log.warning("run %s: %s is not reused from %s: %s", run.id, task, task.reused_from, why)
            fields = {
                "reuse": Reuse.NONE,
                "reused_from": "",
                "not_reused": f"not reused from {task.reused_from}: {why}"[:300],
            }
        if not Task.objects.filter(pk=task.pk, run__state=RunState.SUBMITTING).update(**fields):
            return False
        for name, value in fields.items():
            setattr(task, name, value)
    return True


def _copy(run: Run, task: Task, budget: Budget, backend: Backend) -> dict[str, Any]:
    """Copy one task's reused work; the fields of its row after it."""
    source_run, _, source_task = task.reused_from.partition("/")
    earlier = Task.objects.filter(run_id=source_run, task_id=source_task).first()
    if earlier is None:
        raise Refused("that task is gone")
    source = store.task_folder(source_run, source_task)
    with _staged(run.id, task.task_id) as (folder, stage):
        if task.reuse == Reuse.WHOLE:
            _copy_outputs(source, stage, budget)
            _place(folder, stage, ["out"])
            log.info("run %s: %s done from the outputs of %s", run.id, task, task.reused_from)
            now = timezone.now()
            return {
                "units_reused": task.units_total,
                "units_done": task.units_total,
                "state": TaskState.DONE,
                "message": "",
                "started_at": now,
                "ended_at": now,
                "logs_kept": True,
            }
        units = _copy_units(source, stage, task, earlier, budget)
        if units is None:  # it never started: nothing to say
            return {"reuse": Reuse.NONE, "reused_from": ""}
        if not units:
            return {"reuse": Reuse.NONE, "reused_from": "", "not_reused": _nothing(task)}
        if isinstance(backend, TaskFolders):
            for made in _made_folders(stage):
                with untrusted.directory(stage, made) as fd:
                    backend.hand_over(fd, run.owner_id)
        _place(folder, stage, [name for name in ("units", "out") if _exists(stage, name)])
        log.info("run %s: %s starts with %d units of %s", run.id, task, units, task.reused_from)
        return {"units_reused": units, "units_done": units}


def _nothing(task: Task) -> str:
    return f"not reused from {task.reused_from}: it had no unit done"


@contextmanager
def _staged(run_id: str, task_id: str) -> Iterator[tuple[int, int]]:
    """The new task's folder and a hidden stage in it (descriptors), the stage removed after.

    The folder is the service's: nothing of the run has run yet. A stage an earlier, killed
    copy left is removed first."""
    folder = untrusted.open_dir(store.root(), store.task_parts(run_id, task_id))
    try:
        for entry in untrusted.entries(folder):
            if entry.name.startswith(STAGE_PREFIX):
                shutil.rmtree(entry.name, dir_fd=folder)
        name = f"{STAGE_PREFIX}{secrets.token_hex(4)}"
        os.mkdir(name, DIR_MODE, dir_fd=folder)
        try:
            with untrusted.directory(folder, [name]) as stage:
                yield folder, stage
        finally:
            with suppress(FileNotFoundError):
                shutil.rmtree(name, dir_fd=folder)
    finally:
        os.close(folder)


def _place(folder: int, stage: int, names: list[str]) -> None:
    """Rename the staged ``names`` into the task's folder, over what an earlier, killed copy
    put there before its row was written."""
    for name in names:
        with suppress(FileNotFoundError):
            shutil.rmtree(name, dir_fd=folder)
        os.rename(name, name, src_dir_fd=stage, dst_dir_fd=folder)


def _exists(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _made_folders(stage: int) -> list[tuple[str, ...]]:
    """The staged folders a reusing task's workers write into: its ledger's, and those of
    its outputs and its units' outputs (a command sweep's ``out/units/``)."""
    candidates = [("units",), ("out",), ("out", "units")]
    return [parts for parts in candidates if _exists_below(stage, parts)]


def _exists_below(folder: int, parts: tuple[str, ...]) -> bool:
    try:
        with untrusted.directory(folder, parts):
            return True
    except FileNotFoundError:
        return False


def _copy_outputs(source: TaskFolder, stage: int, budget: Budget) -> None:
    """Copy the earlier task's ``out/`` into ``out`` of the stage."""
    try:
        outputs = source_dir(source, "out")
    except FileNotFoundError:
        raise Refused("its out/ is gone") from None
    try:
        os.mkdir("out", DIR_MODE, dir_fd=stage)
        with untrusted.directory(stage, ["out"]) as target:
            copy_tree(outputs, target, "out", budget)
    finally:
        os.close(outputs)


def _copy_units(
    source: TaskFolder, stage: int, task: Task, earlier: Task, budget: Budget
) -> int | None:
    """Copy the done units of the earlier task's ledger into ``units/reused`` of the stage
    (and, of a command sweep, their ``out/units/<unit>/``); how many units they cover, None
    when it has no ledger (no worker of it started)."""
    try:
        text = untrusted.read_bytes(source.base, source / "units/ledger.json", LEDGER_CAP)
        size = int(json.loads(text)["units"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise Refused(f"its units/ledger.json cannot be read: {error}") from None
    if size != task.units_total:
        raise Refused(f"its ledger has {size} units, this task {task.units_total}")
    os.mkdir("units", DIR_MODE, dir_fd=stage)
    with untrusted.directory(stage, ["units"]) as units:
        os.mkdir(REUSED, DIR_MODE, dir_fd=units)
        with untrusted.directory(units, [REUSED]) as target:
            covered = _copy_pieces(source, target, size, budget, earlier)
    if not covered:
        return 0
    if task.type == SWEEP_TYPE:
        _copy_unit_outputs(source, stage, covered, budget)
    return sum(end - start for start, end in covered)


def _copy_pieces(
    source: TaskFolder, target: int, size: int, budget: Budget, earlier: Task
) -> list[tuple[int, int]]:
    """Copy every piece of the earlier ledger (its workers' and those it reused) whose
    checksum holds, and say which task computed each (``reused/.origins.json``, read by the
    merge for the table's ``reused_from`` column); the units they cover, as merged ranges. A
    damaged piece is left: its units are computed again."""
    ranges: list[tuple[int, int]] = []
    origins: dict[str, str] = {}
    for folder in PIECE_FOLDERS:
        relative = f"units/{folder}"
        try:
            pieces = source_dir(source, relative)
        except FileNotFoundError:
            continue
        try:
            said = _origins(pieces) if folder == REUSED else {}
            otherwise = (
                earlier.reused_from or "earlier"
                if folder == REUSED
                else f"{earlier.run_id}/{earlier.task_id}"
            )
            for entry in listed(pieces, relative, budget):
                units = piece_units(entry.name)
                if units is None or units[1] > size or entry.name in origins:
                    continue
                path = f"{relative}/{entry.name}"
                if not entry.is_file:
                    raise Refused(f"{path} is {kind(entry.mode)}: not followed")
                budget.entry()
                data = read_whole(pieces, entry.name, path, budget)
                if not piece_intact(data):
                    log.warning("%s/%s is damaged: its units run again", source.path, path)
                    continue
                untrusted.write_atomic_at(target, entry.name, data, mode=FILE_MODE)
                origins[entry.name] = said.get(entry.name, otherwise)
                ranges.append(units)
        finally:
            os.close(pieces)
    if origins:
        untrusted.write_atomic_at(target, ORIGINS, json.dumps(origins), mode=FILE_MODE)
    return _merged(ranges)


def _origins(pieces: int) -> dict[str, str]:
    """Which task computed each piece the earlier task reused itself, as its copy said
    (``.origins.json``, read as a task could have left it: bounded, no link followed)."""
    try:
        data = json.loads(untrusted.read_bytes(pieces, ORIGINS, ORIGINS_CAP))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        name: origin[:60]
        for name, origin in data.items()
        if isinstance(name, str) and isinstance(origin, str)
    }


def _copy_unit_outputs(
    source: TaskFolder, stage: int, covered: list[tuple[int, int]], budget: Budget
) -> None:
    """Copy the ``out/units/<unit>/`` folders of the covered units of a command sweep."""
    try:
        outputs = source_dir(source, "out/units")
    except FileNotFoundError:
        return  # no unit wrote a file
    starts = [start for start, _ in covered]
    try:
        os.mkdir("out", DIR_MODE, dir_fd=stage)
        with untrusted.directory(stage, ["out"]) as out:
            os.mkdir("units", DIR_MODE, dir_fd=out)
            with untrusted.directory(out, ["units"]) as target:
                for entry in listed(outputs, "out/units", budget):
                    if not entry.name.isdigit() or not _covers(covered, starts, int(entry.name)):
                        continue
                    path = f"out/units/{entry.name}"
                    if not entry.is_dir:
                        raise Refused(f"{path} is {kind(entry.mode)}, not a unit's folder")
                    budget.entry()
                    copy_dir(outputs, entry.name, target, path, budget, depth=1)
    finally:
        os.close(outputs)


def _covers(covered: list[tuple[int, int]], starts: list[int], unit: int) -> bool:
    index = bisect.bisect_right(starts, unit) - 1
    return index >= 0 and covered[index][0] <= unit < covered[index][1]


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges of units as disjoint, sorted ranges."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
