"""The logs of the local backend's attempts: each launcher writes its attempt's log into the
task's ``logs/`` folder in the store (the service's own) as it runs, so reading them is reading
that folder, walked without links.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from harness import untrusted
from runs.backends.base import KeptLogs, PodLog
from runs.backends.local import submissions
from runs.backends.local.state import Submission, logs_parts

LOG_CAP = 64 << 20
"""The most of a log ``logs`` reads whole."""


def logs_dir(submission: Submission, task: str) -> int:
    """The ``logs/`` folder of a task, the service's own (a folder a task planted there is
    moved aside), walked from the store without links: a descriptor the caller closes.
    The task's folder and its ``out/`` are made if missing, as the service's."""
    task_fd = untrusted.make_dirs(submission.store, ["runs", submission.run, "tasks", task])
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir("out", 0o755, dir_fd=task_fd)
        return untrusted.service_dir(task_fd, "logs")
    finally:
        os.close(task_fd)


def logs(state: Path, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
    """The logs of the processes of a task, oldest first; KeyError for an unknown run."""
    view = submissions.view(state, submissions.read_submission(state, name))
    attempts = [a for n in view.nodes.values() if n.spec.task == task_id for a in n.attempts]
    attempts.sort(key=lambda a: a.launch["started"])  # type: ignore[index]
    if not attempts:
        return []
    try:
        folder = untrusted.own_dir(view.submission.store, logs_parts(view.submission.run, task_id))
    except OSError:
        return []
    try:
        return [
            PodLog(
                node=f"{a.node}({a.number})",
                pod=f"{a.node}-{a.number}",
                text=tail(folder, a.path("log").name, tail_lines),
                done=a.ended,
                attempt=a.number,
            )
            for a in attempts
        ]
    finally:
        os.close(folder)


def keep_logs(state: Path, name: str, task_id: str) -> KeptLogs:
    """Each launcher wrote its attempt's log into the store as it ran: nothing to copy;
    complete once every attempt of the task ended."""
    view = submissions.view(state, submissions.read_submission(state, name))
    ended = [a.ended for n in view.nodes.values() if n.spec.task == task_id for a in n.attempts]
    return KeptLogs(complete=all(ended))


def tail(logs: int, name: str, lines: int | None) -> str:
    """The text of a log of the service's ``logs/`` folder (a descriptor), or its last lines;
    empty when it is missing or not a regular file."""
    try:
        with untrusted.open_regular(logs, name) as handle:
            if lines is None:
                return handle.read(LOG_CAP).decode(errors="replace")
            handle.seek(0, os.SEEK_END)
            end = position = handle.tell()
            chunk = b""
            while position > 0 and chunk.count(b"\n") <= lines:
                position = max(0, position - 65536)
                handle.seek(position)
                chunk = handle.read(end - position)
    except OSError:
        return ""
    text = chunk.decode(errors="replace")
    kept = text.splitlines(keepends=True)[-lines:] if lines > 0 else []
    return "".join(kept)
