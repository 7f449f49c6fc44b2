"""Safe reads of a task directory in the store for the web: progress, logs and outputs.

The web only reads here; pods write, and a task's user can replace anything of its folder by
a link, a FIFO or a sparse giant. So nothing is resolved: every path is walked from the
store's root by ``harness.untrusted`` without following a link (``out/`` itself included),
only regular files are opened, without blocking, and every read stops at a cap.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import BinaryIO

from django.conf import settings

from harness import untrusted
from harness.report import PROGRESS_UNIT
from runs.common import store
from runs.common.store import TaskFolder
from runs.models import Run, Task, TaskKind, TaskState

LOG_NAME = re.compile(r"^(?P<node>[^./][^/]*)-(?P<attempt>\d+)\.log$")
"""``<node>-<attempt>.log`` as the backends write them into ``tasks/<task>/logs/``."""
MAX_LOG_TAIL_LINES = 5000
MAX_LOG_READ_BYTES = 1024 * 1024
"""At most this much of a log in one answer: a follow reads the rest on its next call."""
MAX_LOG_ENTRIES = 10_000
"""Entries of ``logs/`` looked at: a task that fills it with more only hides its own logs."""
MAX_OUTPUTS_LISTED = 500
INLINE_TEXT_BYTES = 64 * 1024
INLINE_IMAGE_BYTES = 5 * 1024 * 1024
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".svg": "image/svg+xml",
}
TEXT_SUFFIXES = {".txt", ".csv", ".tsv", ".json", ".jsonl", ".log", ".md", ".yaml", ".yml", ".dat"}


class NotInOutputs(Exception):
    """The path names no regular file inside the task's ``out/``."""


def units_progressed(folder: TaskFolder, *, done: int, total: int, counted_bytes: int) -> int:
    """Units done: the recorded count plus the units of ``progress.jsonl`` written since.

    The controller counted ``counted_bytes`` of the file into ``done``; only what follows is
    read, and at most ``SIMRUN_PROGRESS_READ_MB`` of it (what lies beyond is left to the
    controller's next poll), so a live page stays cheap. Its whole lines are counted as the
    controller counts them: distinct units by the harness's pattern.
    """
    try:
        fresh = untrusted.read_bytes(
            folder.base,
            folder / "progress.jsonl",
            int(settings.SIMRUN_PROGRESS_READ_MB * 2**20),
            offset=max(0, counted_bytes),
        )
    except OSError:
        return min(done, total)
    units = set(PROGRESS_UNIT.findall(fresh, 0, fresh.rfind(b"\n") + 1))
    return min(total, done + len(units))


@dataclass(frozen=True)
class LogFile:
    """The log of one attempt of one node (pod, process) of a task."""

    node: str
    attempt: int
    file: str
    """Its name in ``logs/``."""
    size: int
    running: bool

    @property
    def name(self) -> str:
        return f"{self.node}-{self.attempt}"


def log_files(folder: TaskFolder) -> list[LogFile]:
    """The logs of a task, by node then attempt; ``running`` while a ``.pid`` is beside one.
    Listed by descriptor: regular files only, a ``logs/`` that is a link lists nothing."""
    entries = untrusted.list_dir(folder.base, folder / "logs", limit=MAX_LOG_ENTRIES)
    pids = {e.name for e in entries if e.name.endswith(".pid")}
    found = []
    for entry in entries:
        match = LOG_NAME.match(entry.name)
        if not match or not entry.is_file:
            continue
        stem = entry.name.removesuffix(".log")
        found.append(
            LogFile(
                node=match["node"],
                attempt=int(match["attempt"]),
                file=entry.name,
                size=entry.size,
                running=f"{stem}.pid" in pids,
            )
        )
    return sorted(found, key=lambda log: (log.node, log.attempt))


def read_tail(folder: TaskFolder, name: str, lines: int) -> tuple[str, int]:
    """The last ``lines`` lines of a log of ``logs/`` (at most ``MAX_LOG_READ_BYTES``) and its
    size; ``OSError`` for one that is not a regular file."""
    lines = max(1, min(lines, MAX_LOG_TAIL_LINES))
    with untrusted.open_file(folder.base, folder / f"logs/{name}") as file:
        size = os.fstat(file.fileno()).st_size
        start = max(0, size - MAX_LOG_READ_BYTES)
        file.seek(start)
        data = file.read(min(size - start, MAX_LOG_READ_BYTES))
    # A trailing newline ends the last line; it starts no new one.
    kept = data.rstrip(b"\n").split(b"\n")[-lines:] if data else []
    text = b"\n".join(kept).decode("utf-8", errors="replace")
    return (text + "\n" if kept else ""), size


def read_from(folder: TaskFolder, name: str, offset: int) -> tuple[str, int]:
    """What a log of ``logs/`` holds from byte ``offset`` (at most ``MAX_LOG_READ_BYTES``), and
    the next offset.

    Only whole lines are returned while more may follow, so a follower never splits a line or
    a UTF-8 character between two reads.
    """
    with untrusted.open_file(folder.base, folder / f"logs/{name}") as file:
        size = os.fstat(file.fileno()).st_size
        offset = max(0, min(offset, size))
        file.seek(offset)
        data = file.read(min(size - offset, MAX_LOG_READ_BYTES))
    cut = data.rfind(b"\n") + 1
    if cut:
        data = data[:cut]
    elif len(data) < MAX_LOG_READ_BYTES:
        data = b""
    return data.decode("utf-8", errors="replace"), offset + len(data)


def search_lines(text: str, query: str) -> str:
    """The lines of ``text`` that contain ``query``, case-insensitively."""
    needle = query.casefold()
    return "".join(line for line in text.splitlines(keepends=True) if needle in line.casefold())


@dataclass(frozen=True)
class OutputFile:
    """A file of a task's ``out/``, by its path relative to it."""

    path: str
    size: int

    @property
    def shown(self) -> str:
        """The path as a page may show it: bytes that are not UTF-8 and characters that do not
        print (a newline) escaped, ``\\xff``, ``\\n``."""
        text = os.fsencode(self.path).decode("utf-8", errors="backslashreplace")
        return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)

    @property
    def linkable(self) -> bool:
        """Whether it can be named by a URL: printable UTF-8 (an escaped name cannot)."""
        return self.shown == self.path

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.path).suffix.lower()

    @property
    def is_image(self) -> bool:
        return self.suffix in IMAGE_TYPES

    @property
    def is_text(self) -> bool:
        return self.suffix in TEXT_SUFFIXES

    @property
    def inline(self) -> bool:
        """Whether a page may show it: an image or a text under the caps."""
        if self.is_image:
            return self.size <= INLINE_IMAGE_BYTES
        return self.is_text and self.size <= INLINE_TEXT_BYTES


@dataclass(frozen=True)
class Outputs:
    """The files of a task's ``out/`` that a listing shows, and why it is incomplete ("too
    deep: …", "too many: …"), empty when it is whole."""

    files: list[OutputFile]
    cut: str = ""


def output_files(folder: TaskFolder, limit: int = MAX_OUTPUTS_LISTED) -> Outputs:
    """The regular files of ``out/``, sorted, at most ``limit``; hidden ones, links (``out/``
    itself one included), FIFOs and devices left aside. The walk is bounded
    (``SIMRUN_WALK_DEPTH`` folders down, ``SIMRUN_WALK_ENTRIES`` entries looked at)."""
    walk = untrusted.Walk(
        folder.base,
        folder / "out",
        depth=settings.SIMRUN_WALK_DEPTH,
        limit=settings.SIMRUN_WALK_ENTRIES,
        hidden=False,
    )
    try:
        found = [OutputFile(path, size) for path, size in untrusted.walk_files(walk, limit + 1)]
    except OSError:
        return Outputs([])
    cut = walk.cut
    if len(found) > limit:
        found, cut = found[:limit], cut or f"too many: more than {limit} files"
    return Outputs(sorted(found, key=lambda f: natural(f.path)), cut)


def natural(path: str) -> tuple[tuple[int, int, str], ...]:
    """A path's sort key with its numbers as numbers: ``units/2`` before ``units/10``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in path.split("/"))


def open_output(folder: TaskFolder, relative: str) -> tuple[BinaryIO, OutputFile]:
    """Open a regular file of the task's ``out/`` by its relative path, walked from the store's
    root without following a link; ``NotInOutputs`` for anything else."""
    parts = PurePosixPath(relative).parts
    if (
        not relative
        or "\x00" in relative
        or relative.startswith("/")
        or any(p in {"..", "."} or p.startswith(".") for p in parts)
    ):
        raise NotInOutputs(relative)
    try:
        file = untrusted.open_file(folder.base, (*(folder / "out"), *parts))
    except OSError:
        raise NotInOutputs(relative) from None
    size = os.fstat(file.fileno()).st_size
    return file, OutputFile(PurePosixPath(*parts).as_posix(), size)


def content_type(output: OutputFile) -> str:
    """How an output is served: images as themselves, texts as plain text, the rest as bytes."""
    if output.is_image:
        return IMAGE_TYPES[output.suffix]
    if output.is_text:
        return "text/plain; charset=utf-8"
    return "application/octet-stream"


def units_now(task: Task) -> int:
    """The units of a task done by now: of a running task, the progress written since the poll."""
    if task.state != TaskState.RUNNING or task.kind != TaskKind.SPLIT:
        return min(task.units_done, task.units_total)
    return units_progressed(
        store.task_folder(task.run_id, task.task_id),
        done=task.units_done,
        total=task.units_total,
        counted_bytes=task.progress_bytes,
    )


def attach_progress(run: Run, tasks: list[Task]) -> None:
    """Set ``units_now`` on each task and the run's sums ``units_done_sum``,
    ``units_total_sum`` and ``units_failed_sum``."""
    for task in tasks:
        task.units_now = units_now(task)  # type: ignore[attr-defined]
    run.units_done_sum = sum(t.units_now for t in tasks)  # type: ignore[attr-defined]
    run.units_total_sum = sum(t.units_total for t in tasks)  # type: ignore[attr-defined]
    run.units_failed_sum = sum(t.units_failed for t in tasks)  # type: ignore[attr-defined]


def preview(folder: TaskFolder, relative: str, max_bytes: int = 8192) -> str:
    """The start of a text output for a page, at most ``max_bytes``; empty when unreadable."""
    try:
        file, _ = open_output(folder, relative)
    except NotInOutputs:
        return ""
    with file:
        data = file.read(max_bytes)
    return data.decode("utf-8", errors="replace")
