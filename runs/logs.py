"""Pod logs kept in the store, ``tasks/<task>/logs/<node>-<attempt>.log`` (spec/000).

The logs of terminated pods are copied from the backend into the store as the pods end
(a cluster's pod GC deletes succeeded pods soon), so they outlive the pods (and the workflow,
deleted by its time to live). The local
backend writes the same files live; a log file that exists is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from harness.files import write_atomic
from runs.backends.base import PodLog

RETRY_SUFFIX = re.compile(r"\((\d+)\)$")
"""Argo's suffix of the attempt of a retried node, ``squares-w0(1)``."""
UNSAFE = re.compile(r"[/\x00]")


def log_name(log: PodLog) -> str:
    """The file of a pod's log: its DAG node without the retry suffix, then its attempt."""
    node, attempt = log.node, log.attempt
    suffix = RETRY_SUFFIX.search(node)
    if suffix is not None:
        node = node[: suffix.start()]
        attempt = int(suffix[1]) if attempt is None else attempt
    return f"{UNSAFE.sub('_', node)}-{attempt or 0}.log"


def keep(task_dir: Path, logs: Iterable[PodLog]) -> bool:
    """Write the logs of the pods that terminated (a line saying why for a log that cannot be
    read any more); whether every pod had terminated."""
    folder = task_dir / "logs"
    complete = True
    for log in logs:
        if not log.done:
            complete = False
            continue
        text = f"[simrun] no log was kept: {log.missing}\n" if log.missing else log.text
        _write(folder / log_name(log), text.encode())
    return complete


def _write(path: Path, data: bytes) -> None:
    """Write a log atomically, once: a file that exists is the log already."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def kept(task_dir: Path) -> list[Path]:
    """The logs kept for a task, by name."""
    folder = task_dir / "logs"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix == ".log" and not p.name.startswith("."))
