"""The logs of a task's attempts: the ones kept in the store and, while pods live, the backend's.

Locally every process writes its log into the store as it runs (a ``.pid`` beside it while it
runs); on a cluster the controller keeps a pod's log in the store once its task is final, and
until then the backend's ``logs`` read call has it. A log in the store wins over the backend's
copy of the same attempt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runs.backends import get_backend
from runs.backends.base import PodLog
from runs.backends.logs import log_name
from runs.common import store
from runs.models import Task
from runs.reads import task_files

logger = logging.getLogger(__name__)

DEFAULT_TAIL = 200


@dataclass(frozen=True)
class TaskLog:
    """One attempt's log: a file of the store, or the text a backend gave."""

    node: str
    attempt: int
    size: int
    running: bool
    file: str | None = None
    """Its name in the task's ``logs/`` when the store has it."""
    pod: PodLog | None = None

    @property
    def name(self) -> str:
        return f"{self.node}-{self.attempt}"

    @property
    def source(self) -> str:
        return "store" if self.file is not None else "backend"


@dataclass(frozen=True)
class LogText:
    """Part of a log: ``text`` up to byte ``offset``, where a follower asks next."""

    log: TaskLog
    text: str
    offset: int


def _backend_logs(task: Task, tail_lines: int | None) -> list[PodLog]:
    """The backend's logs of a task's pods while its run may still have pods; [] on a failure."""
    run = task.run
    backend = get_backend()
    # A backend that writes its logs into the store as they grow has nothing more to say.
    if not run.workflow or backend.logs_in_store or not run.live:
        return []
    try:
        return list(backend.logs(run.workflow, task.task_id, tail_lines))
    except KeyError:
        return []  # the workflow is gone: what was kept is in the store
    except Exception as error:  # a cluster that does not answer must not break the page
        logger.warning("no logs from the backend for %s: %s", task, error)
        return []


def task_logs(task: Task, *, tail_lines: int | None = None) -> list[TaskLog]:
    """Every log of a task, by node then attempt."""
    found = {
        f.name: TaskLog(f.node, f.attempt, f.size, f.running, file=f.file)
        for f in task_files.log_files(store.task_folder(task.run_id, task.task_id))
    }
    for pod in _backend_logs(task, tail_lines):
        # Named as the controller names the file it keeps (Argo's retry suffix read as the
        # attempt), so a kept log and the backend's copy of it are one attempt.
        node, _, attempt = log_name(pod).removesuffix(".log").rpartition("-")
        log = TaskLog(node, int(attempt), len(pod.text.encode()), running=not pod.done, pod=pod)
        found.setdefault(log.name, log)
    return sorted(found.values(), key=lambda log: (log.node, log.attempt))


def read_log(
    task: Task, name: str, *, tail: int | None = None, offset: int | None = None
) -> LogText | None:
    """The tail of a log (``tail`` lines) or what follows byte ``offset``; None for no such log."""
    if offset is None and tail is None:
        tail = DEFAULT_TAIL
    logs = {log.name: log for log in task_logs(task, tail_lines=tail if offset is None else None)}
    log = logs.get(name)
    if log is None:
        return None
    if log.file is not None:
        folder = store.task_folder(task.run_id, task.task_id)
        try:
            if offset is not None:
                text, end = task_files.read_from(folder, log.file, offset)
            else:
                text, end = task_files.read_tail(folder, log.file, tail or DEFAULT_TAIL)
        except OSError:
            return None
        return LogText(log, text, end)
    data = log.pod.text.encode() if log.pod else b""
    if offset is None:
        return LogText(log, data.decode(errors="replace"), len(data))
    start = max(0, min(offset, len(data)))
    return LogText(log, data[start:].decode(errors="replace"), len(data))
