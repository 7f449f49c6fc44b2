"""simrun-merge: merge the units of a split task once its ledger is complete.

A successful merge writes ``out/.simrun-merged`` last, the controller's evidence that the
task's outputs are whole. The coordinator of a task whose plan says ``coordinator_merges``
merges through ``merge_exit`` itself (the local backend has no merge pod).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import time
from collections.abc import Sequence

from pydantic import BaseModel

from harness import config
from harness.config import TaskPaths
from harness.errors import (
    EXIT_CONFIGURATION,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_TERMINATED,
    STORAGE_ERRNOS,
    ConfigurationError,
)
from harness.files import write_atomic
from harness.ledger import DamagedPieces, Ledger
from harness.lifecycle import configure_logging, note_retry_memory, sigterm_stops
from harness.report import harness_started
from harness.results import is_flat, write_mappings
from harness.sources import install_sources
from harness.tasktypes import MergeContext, TaskType, get_task_type

MERGED_MARKER = ".simrun-merged"
"""Written into ``out/`` after a successful merge."""

log = logging.getLogger("simrun.harness")


def run_merge(task_type: TaskType, settings: BaseModel, paths: TaskPaths) -> None:
    """Merge the units of a task once its ledger is complete, then write the marker.

    When every unit returned a flat mapping (``harness.results.is_flat``), the results table
    ``out/results.csv`` is written after the type's merge; the units reused from an earlier
    task (a resume: ``Ledger.reused_from``) are marked in its ``reused_from`` column.

    Units of pieces the store damaged (truncated, a bad checksum) are computed again here
    first. Raises ``ValueError`` when the task type is not splittable or the ledger has
    another number of units, ``RuntimeError`` naming the units not done.
    """
    if not task_type.splittable or task_type.units is None or task_type.merge is None:
        raise ValueError(f"task type {task_type.name!r} is not splittable")
    try:
        ledger = Ledger.read(paths.ledger)
    except FileNotFoundError:
        raise RuntimeError(f"no ledger at {paths.ledger}: no worker has started") from None
    units = task_type.units(settings)
    if ledger.size != units:
        raise ValueError(f"the ledger {paths.ledger} has {ledger.size} units, the task {units}")
    try:
        results = ledger.results()
    except DamagedPieces as damaged:
        log.warning("%s: computing them again", damaged)
        recompute(task_type, settings, ledger, damaged.missing)
        results = ledger.results()
    paths.out.mkdir(parents=True, exist_ok=True)
    marker = paths.out / MERGED_MARKER
    marker.unlink(missing_ok=True)  # a merge again: no marker until this one is whole
    reused_from = ledger.reused_from()
    task_type.merge(
        settings,
        MergeContext(results=results, out=paths.out, inputs=paths.inputs, reused_from=reused_from),
    )
    if all(is_flat(result) for result in results):  # a type's table (a sweep writes its own)
        write_mappings(paths.out, results, reused_from)
    write_atomic(marker, json.dumps({"units": units, "merged": time.time()}))


def recompute(
    task_type: TaskType, settings: BaseModel, ledger: Ledger, ranges: Sequence[range]
) -> None:
    """Compute units again in this process and store them: the units of damaged pieces."""
    assert task_type.compute is not None
    context = task_type.setup(settings) if task_type.setup is not None else None
    for units in ranges:
        ledger.write_piece(list(units), [task_type.compute(settings, context, u) for u in units])


def merge_exit(task_type: TaskType, settings: BaseModel, paths: TaskPaths) -> int:
    """Run the merge and map its end onto an exit code: 0 merged, 3 it failed, 75 the store
    failed (a full disk, a transient NFS error: retried). A merge that calls ``sys.exit()``,
    whatever its code, did not finish: it is a failed merge, never a success."""
    try:
        run_merge(task_type, settings, paths)
    except SystemExit as leaving:
        log.error("the merge of %s exited (%s) before it finished", paths.task_dir.name, leaving)
        return EXIT_FAILED
    except OSError as error:
        if error.errno not in STORAGE_ERRNOS:
            log.exception("the merge of %s failed", paths.task_dir.name)
            return EXIT_FAILED
        log.error("the store failed under the merge of %s: %s", paths.task_dir.name, error)
        return EXIT_STORAGE
    except Exception:
        log.exception("the merge of %s failed", paths.task_dir.name)
        return EXIT_FAILED
    log.info("merged %s into %s", paths.task_dir.name, paths.out)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run simrun-merge after the workers of a split task; returns its exit code.

    SIGTERM is handled from the start: a merge stopped before it began exits 143. Exit codes:
    0 merged, 3 the ledger is incomplete or the merge failed, 4 a configuration error, 75 the
    store failed (retried), 143 stopped on SIGTERM before the merge.
    """
    with sigterm_stops() as stop:
        harness_started()
        note_retry_memory(os.environ)
        argparse.ArgumentParser(
            prog="simrun-merge", description="Merge the units of the task of SIMRUN_TASK_DIR."
        ).parse_args(argv)
        configure_logging("simrun-merge")
        try:
            install_sources(os.environ, stop)
            if stop.is_set():
                return EXIT_TERMINATED
            paths = config.paths_from_env(os.environ)
            task = config.read_task(paths)
            task_type = get_task_type(task.type)
            settings = task_type.settings_or_error(task.settings)
            if not task_type.splittable:
                raise ConfigurationError(f"task type {task.type!r} is not splittable")
        except (ConfigurationError, OSError, ValueError, subprocess.CalledProcessError) as error:
            log.error("configuration error: %s", error)
            return EXIT_CONFIGURATION
        if stop.is_set():
            log.info("stopped on SIGTERM before the merge")
            return EXIT_TERMINATED
        return merge_exit(task_type, settings, paths)


if __name__ == "__main__":
    raise SystemExit(main())
