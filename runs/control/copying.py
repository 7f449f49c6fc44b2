"""Files of an earlier task copied as the service's own, read as a task could have left them.

Walked by descriptor from the store, no link followed, regular files and folders only, at most
``MAX_DEPTH`` folders deep, each file within what is left of its owner's budget
(``SIMRUN_REUSE_MAX_GB``, ``SIMRUN_REUSE_MAX_FILES``: ``copy_ledger``), counted by the blocks
it takes. A link, a FIFO, a device, a file with a second name or more than the budget raises
``Refused`` with the reason, and nothing was followed. What is copied is the service's own:
files ``0644``, ``0755`` when executable, folders ``0755``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

from harness import untrusted
from runs.common.store import TaskFolder
from runs.control import disk

MAX_DEPTH = 32
"""Folders below ``out/`` a reused tree may have: deeper is refused, not walked."""
CHUNK = 1 << 20
FILE_MODE, EXECUTABLE_MODE, DIR_MODE = 0o644, 0o755, 0o755
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """Why the work of an earlier task is not reused, in a clause."""


@dataclass
class Budget:
    """What the copies of one owner's live runs may spend together (``copy_ledger``): bytes
    on disk, and files and folders; ``bytes`` and ``files``, what they spent so far."""

    max_bytes: int
    max_files: int
    bytes: int = 0
    files: int = 0

    @classmethod
    def from_settings(cls) -> Budget:
        return cls(
            max_bytes=int(settings.SIMRUN_REUSE_MAX_GB * 2**30),
            max_files=settings.SIMRUN_REUSE_MAX_FILES,
        )

    def entry(self) -> None:
        """Count one more file or folder to copy."""
        self.files += 1
        if self.files > self.max_files:
            raise Refused(
                f"more than the {self.max_files:,} files and folders the copies of its "
                "owner's live runs may make together (SIMRUN_REUSE_MAX_FILES)"
            )

    def size(self, path: str, size: int) -> None:
        """Count a file of ``size`` bytes to copy."""
        left = self.max_bytes - self.bytes
        if size > left:
            raise Refused(
                f"{path} takes {_bytes(size)}, more than the {_bytes(left)} left of what the "
                "copies of its owner's live runs may take together (SIMRUN_REUSE_MAX_GB)"
            )
        self.bytes += size


def source_dir(source: TaskFolder, relative: str) -> int:
    """A folder of the earlier task; ``Refused`` when it is not one (a link, a file)."""
    parts = source / relative
    try:
        return untrusted.open_dir(source.base, parts)
    except FileNotFoundError:
        raise
    except OSError as error:
        what = _what_is(source.base, parts, error)
        raise Refused(f"its {relative}/ is {what}: not followed") from None


def listed(folder: int, relative: str, budget: Budget) -> list[untrusted.Entry]:
    """The entries of a folder of the earlier task, all of them or ``Refused``: a listing
    cut short would leave out what its pieces say is done."""
    found = untrusted.entries(folder, limit=budget.max_files + 1)
    if len(found) > budget.max_files:
        raise Refused(
            f"{relative}/ holds more than the {budget.max_files:,} files and folders the copies "
            "of its owner's live runs may make together (SIMRUN_REUSE_MAX_FILES)"
        )
    return found


def copy_tree(source: int, target: int, where: str, budget: Budget, depth: int = 0) -> None:
    """Copy the entries of the folder ``source`` into the new folder ``target``."""
    for entry in listed(source, where, budget):
        path = f"{where}/{entry.name}"
        budget.entry()
        if entry.is_dir:
            copy_dir(source, entry.name, target, path, budget, depth + 1)
        elif entry.is_file:
            _copy_file(source, entry.name, target, path, budget)
        else:
            raise Refused(f"{path} is {kind(entry.mode)}: not followed")


def copy_dir(source: int, name: str, target: int, path: str, budget: Budget, depth: int) -> None:
    """Copy the folder ``name`` of ``source`` into ``target``, refusing one too deep."""
    if depth > MAX_DEPTH:
        raise Refused(f"{path} is more than {MAX_DEPTH} folders deep")
    try:
        inner = untrusted.open_dir(source, [name])
    except OSError as error:
        raise Refused(f"{path} is {_what_is(source, (name,), error)}: not followed") from None
    try:
        os.mkdir(name, DIR_MODE, dir_fd=target)
        with untrusted.directory(target, [name]) as made:
            copy_tree(inner, made, path, budget, depth)
    finally:
        os.close(inner)


def _copy_file(source: int, name: str, target: int, path: str, budget: Budget) -> None:
    """Copy a regular file as the service's, as large as it was when opened, holes kept: only
    its chunks that hold something are written, so a sparse file stays sparse and costs the
    budget and the store the bytes it takes on disk, not its apparent size."""
    data = _opened(source, name, path)
    with data:
        status = os.fstat(data.fileno())
        on_disk = min(status.st_size, status.st_blocks * 512)
        budget.size(path, on_disk)
        if full := disk.no_room(target, on_disk):
            raise Refused(f"{path} takes {_bytes(on_disk)} on disk and {full}")
        mode = EXECUTABLE_MODE if status.st_mode & stat.S_IXUSR else FILE_MODE
        fd = os.open(name, WRITE_FLAGS, mode, dir_fd=target)
        with open(fd, "wb") as copy:
            os.fchmod(fd, mode)
            written = 0
            for start, end in disk.data_regions(data.fileno(), status.st_size):
                data.seek(start)
                at = start
                while at < end and (chunk := data.read(min(CHUNK, end - at))):
                    if chunk.count(0) != len(chunk):
                        written += len(chunk)
                        if written > on_disk:  # more than it took on disk: charged as it goes
                            budget.size(path, len(chunk))
                        copy.seek(at)
                        copy.write(chunk)
                    at += len(chunk)
            copy.truncate(status.st_size)


def read_whole(folder: int, name: str, path: str, budget: Budget) -> bytes:
    """A regular file of the earlier task, whole, within the budget."""
    with _opened(folder, name, path) as data:
        size = os.fstat(data.fileno()).st_size
        budget.size(path, size)
        return data.read(size)


def _opened(folder: int, name: str, path: str) -> BinaryIO:
    """A regular file of one name, opened without following a link or waiting on a FIFO."""
    try:
        data = untrusted.open_regular(folder, name)
    except OSError as error:
        raise Refused(f"{path} is {_not_a_file(error)}: not followed") from None
    links = os.fstat(data.fileno()).st_nlink
    if links > 1:
        data.close()
        raise Refused(f"{path} has {links} names (a hard link): not copied")
    return data


def kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode):
        return "a file, no folder"
    return "no regular file or folder"


def _what_is(base: Path | int, parts: tuple[str, ...], error: OSError) -> str:
    """What a path that would not open as a folder is, for a message: looked at from its
    parent without following it."""
    try:
        with untrusted.directory(base, parts[:-1]) as parent:
            return kind(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return f"no folder ({error.strerror or error})"


def _not_a_file(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "a link"
    if isinstance(error, untrusted.Refused):
        return "no regular file"
    return f"unreadable ({error.strerror or error})"


def _bytes(size: int) -> str:
    """A size for a message: ``3.2 GiB``, ``512 KiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
