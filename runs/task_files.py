"""Safe reads of a task directory in the store for the web: progress, logs and outputs.

The web only reads here; pods write. A path a request names is resolved and checked to stay
inside the task's ``out/`` (no ``..``, no link leading out, regular files only), and the check
is repeated on the opened file descriptor so a link swapped in meanwhile cannot escape.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from harness.report import PROGRESS_UNIT
from runs import store
from runs.models import Run, Task, TaskKind, TaskState

LOG_NAME = re.compile(r"^(?P<node>[^./][^/]*)-(?P<attempt>\d+)\.log$")
"""``<node>-<attempt>.log`` as the backends write them into ``tasks/<task>/logs/``."""
MAX_LOG_TAIL_LINES = 5000
MAX_LOG_READ_BYTES = 1024 * 1024
"""At most this much of a log in one answer: a follow reads the rest on its next call."""
PROGRESS_READ_BYTES = 4 * 1024 * 1024
"""Unread progress beyond this is left to the controller, which counts it at its next poll."""
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


def units_progressed(task_dir: Path, *, done: int, total: int, counted_bytes: int) -> int:
    """Units done: the recorded count plus the units of ``progress.jsonl`` written since.

    The controller counted ``counted_bytes`` of the file into ``done``; only what follows is
    read, and at most ``PROGRESS_READ_BYTES`` of it, so a live page stays cheap. Its whole
    lines are counted as the controller counts them: distinct units by the harness's pattern.
    """
    try:
        with (task_dir / "progress.jsonl").open("rb") as file:
            file.seek(counted_bytes)
            fresh = file.read(PROGRESS_READ_BYTES)
    except OSError:
        return min(done, total)
    units = set(PROGRESS_UNIT.findall(fresh, 0, fresh.rfind(b"\n") + 1))
    return min(total, done + len(units))


@dataclass(frozen=True)
class LogFile:
    """The log of one attempt of one node (pod, process) of a task."""

    node: str
    attempt: int
    path: Path
    size: int
    running: bool

    @property
    def name(self) -> str:
        return f"{self.node}-{self.attempt}"


def log_files(task_dir: Path) -> list[LogFile]:
    """The logs of a task, by node then attempt; ``running`` while a ``.pid`` is beside one."""
    folder = task_dir / "logs"
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    pids = {e.name for e in entries if e.name.endswith(".pid")}
    found = []
    for entry in entries:
        match = LOG_NAME.match(entry.name)
        if not match or not entry.is_file(follow_symlinks=False):
            continue
        stem = entry.name.removesuffix(".log")
        found.append(
            LogFile(
                node=match["node"],
                attempt=int(match["attempt"]),
                path=Path(entry.path),
                size=entry.stat(follow_symlinks=False).st_size,
                running=f"{stem}.pid" in pids,
            )
        )
    return sorted(found, key=lambda log: (log.node, log.attempt))


def read_tail(path: Path, lines: int) -> tuple[str, int]:
    """The last ``lines`` lines of a file (at most ``MAX_LOG_READ_BYTES``) and its size."""
    lines = max(1, min(lines, MAX_LOG_TAIL_LINES))
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        start = max(0, size - MAX_LOG_READ_BYTES)
        file.seek(start)
        data = file.read(size - start)
    # A trailing newline ends the last line; it starts no new one.
    kept = data.rstrip(b"\n").split(b"\n")[-lines:] if data else []
    text = b"\n".join(kept).decode("utf-8", errors="replace")
    return (text + "\n" if kept else ""), size


def read_from(path: Path, offset: int) -> tuple[str, int]:
    """What a file holds from byte ``offset`` (at most ``MAX_LOG_READ_BYTES``), and the next offset.

    Only whole lines are returned while more may follow, so a follower never splits a line or
    a UTF-8 character between two reads.
    """
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
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


def output_files(task_dir: Path, limit: int = MAX_OUTPUTS_LISTED) -> list[OutputFile]:
    """The regular files of ``out/`` (hidden ones and links leading out left aside), sorted."""
    out = task_dir / "out"
    try:
        root = out.resolve(strict=True)
    except OSError:
        return []
    found: list[OutputFile] = []
    for path in _walk(root):
        relative = path.relative_to(root).as_posix()
        try:
            real = path.resolve(strict=True)
            size = real.stat().st_size
        except OSError:
            continue
        if real.is_relative_to(root) and real.is_file():
            found.append(OutputFile(relative, size))
        if len(found) >= limit:
            break
    return sorted(found, key=lambda f: f.path)


def _walk(root: Path) -> Iterator[Path]:
    """Non-hidden entries below ``root`` that are files or links, without following dir links."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name


def open_output(task_dir: Path, relative: str) -> tuple[BinaryIO, OutputFile]:
    """Open a file of the task's ``out/`` by its relative path; ``NotInOutputs`` otherwise."""
    parts = PurePosixPath(relative).parts
    if (
        not relative
        or "\x00" in relative
        or relative.startswith("/")
        or any(p in {"..", "."} or p.startswith(".") for p in parts)
    ):
        raise NotInOutputs(relative)
    try:
        root = (task_dir / "out").resolve(strict=True)
        real = root.joinpath(*parts).resolve(strict=True)
    except (OSError, RuntimeError):
        raise NotInOutputs(relative) from None
    if not real.is_relative_to(root):
        raise NotInOutputs(relative)
    try:
        file = real.open("rb")
    except OSError:
        raise NotInOutputs(relative) from None
    try:
        # The path may have changed between resolve and open: check what was opened.
        opened = Path(os.readlink(f"/proc/self/fd/{file.fileno()}"))
        status = os.fstat(file.fileno())
    except OSError:
        file.close()
        raise NotInOutputs(relative) from None
    if not opened.is_relative_to(root) or not stat.S_ISREG(status.st_mode):
        file.close()
        raise NotInOutputs(relative)
    return file, OutputFile(PurePosixPath(*parts).as_posix(), status.st_size)


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
        store.task_dir(task.run_id, task.task_id),
        done=task.units_done,
        total=task.units_total,
        counted_bytes=task.progress_bytes,
    )


def attach_progress(run: Run, tasks: list[Task]) -> None:
    """Set ``units_now`` on each task and the run's sums ``units_done_sum``/``units_total_sum``."""
    for task in tasks:
        task.units_now = units_now(task)  # type: ignore[attr-defined]
    run.units_done_sum = sum(t.units_now for t in tasks)  # type: ignore[attr-defined]
    run.units_total_sum = sum(t.units_total for t in tasks)  # type: ignore[attr-defined]


def preview(task_dir: Path, relative: str, max_bytes: int = 8192) -> str:
    """The start of a text output for a page, at most ``max_bytes``; empty when unreadable."""
    try:
        file, _ = open_output(task_dir, relative)
    except NotInOutputs:
        return ""
    with file:
        data = file.read(max_bytes)
    return data.decode("utf-8", errors="replace")
