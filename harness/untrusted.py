"""Files a task could have written, opened without believing them.

Below a folder the service made (the store's root), any path may have been replaced by a task
with a link, a FIFO, a device or a sparse giant. Such a path is never resolved: it is walked
from a directory descriptor one component at a time with ``O_NOFOLLOW`` and ``O_NONBLOCK``,
what was opened is checked with ``fstat`` before it is used (a regular file, or a directory
for listings), and every read stops at a cap. A folder the service writes into is its own:
one a task made in its place is moved aside, and files in it are created relative to its
descriptor, so a link planted there is never followed.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
PASS_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""A folder only crossed on the way: no read permission needed, no link followed."""
WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
SERVICE_DIR_MODE = 0o750
"""A folder of the service inside a task's: its group (the web, the workers) reads it."""


class Refused(OSError):
    """A path that is not what it must be: a link, a FIFO, a device, a folder not the service's."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(errno.EPERM, why, path)


def parts_of(relative: str | PurePosixPath | Sequence[str]) -> tuple[str, ...]:
    """The components of a relative path, refusing what could step out (``..``, absolute)."""
    if isinstance(relative, str | PurePosixPath):
        text = str(relative)
        if text.startswith("/") or "\x00" in text:
            raise Refused(text, "not a relative path")
        parts: Sequence[str] = [p for p in text.split("/") if p not in ("", ".")]
    else:
        parts = relative
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\x00" in part:
            raise Refused("/".join(parts), f"not a plain name: {part!r}")
    return tuple(parts)


def open_dir(base: Path | int, relative: str | PurePosixPath | Sequence[str] = ()) -> int:
    """A descriptor of the directory ``relative`` below ``base`` (a trusted path or descriptor),
    walked without following any link; the caller closes it. The folders on the way are only
    crossed (``O_PATH``), so one that may be crossed but not listed (the store for a task's
    user) is no obstacle."""
    parts = parts_of(relative)
    last = len(parts) - 1
    flags = PASS_FLAGS if parts else DIRECTORY_FLAGS
    if isinstance(base, int):
        fd = os.open(".", flags, dir_fd=base)
    else:
        fd = os.open(base, flags & ~os.O_NOFOLLOW)  # the service's own setting
    try:
        for index, part in enumerate(parts):
            child = os.open(part, DIRECTORY_FLAGS if index == last else PASS_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def directory(
    base: Path | int, relative: str | PurePosixPath | Sequence[str] = ()
) -> Iterator[int]:
    """``open_dir`` as a context that closes the descriptor."""
    fd = open_dir(base, relative)
    try:
        yield fd
    finally:
        os.close(fd)


def open_regular(dir_fd: int, name: str) -> BinaryIO:
    """A regular file of a directory, opened for reading; ``Refused`` for anything else."""
    parts_of([name])
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(name, "not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_file(base: Path | int, relative: str | PurePosixPath | Sequence[str]) -> BinaryIO:
    """A regular file below ``base``, every component walked without links."""
    parts = parts_of(relative)
    if not parts:
        raise Refused("", "no file named")
    with directory(base, parts[:-1]) as fd:
        return open_regular(fd, parts[-1])


def read_bytes(
    base: Path | int,
    relative: str | PurePosixPath | Sequence[str],
    cap: int,
    *,
    offset: int = 0,
) -> bytes:
    """At most ``cap`` bytes of a regular file below ``base``, from ``offset``."""
    with open_file(base, relative) as file:
        if offset:
            file.seek(offset)
        return file.read(max(0, cap))


def file_size(base: Path | int, relative: str | PurePosixPath | Sequence[str]) -> int:
    """The size of a regular file below ``base`` (a sparse file counts its apparent size)."""
    with open_file(base, relative) as file:
        return os.fstat(file.fileno()).st_size


@dataclass(frozen=True)
class Entry:
    """An entry of a directory as it is, links not followed."""

    name: str
    mode: int
    size: int
    uid: int
    mtime: float

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


def entries(dir_fd: int, limit: int = 100_000) -> list[Entry]:
    """The entries of a directory (at most ``limit``), each as ``lstat`` sees it."""
    found: list[Entry] = []
    with os.scandir(dir_fd) as scan:
        for item in scan:
            try:
                status = item.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append(
                Entry(item.name, status.st_mode, status.st_size, status.st_uid, status.st_mtime)
            )
            if len(found) >= limit:
                break
    return found


def list_dir(
    base: Path | int, relative: str | PurePosixPath | Sequence[str], limit: int = 100_000
) -> list[Entry]:
    """The entries of a directory below ``base``; empty when it is missing or refused."""
    try:
        with directory(base, relative) as fd:
            return entries(fd, limit)
    except OSError:
        return []


def walk_files(
    base: Path | int, relative: str | PurePosixPath | Sequence[str], limit: int
) -> Iterator[tuple[str, int]]:
    """The regular files below a directory as (relative path, size), hidden ones and links
    left aside, at most ``limit``; directories are entered by descriptor, never by a link."""
    with directory(base, relative) as top:
        count = 0
        for folder, dirs, files, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            prefix = PurePosixPath(folder)
            for name in sorted(files):
                if name.startswith("."):
                    continue
                try:
                    status = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(status.st_mode):
                    continue
                yield (prefix / name).as_posix(), status.st_size
                count += 1
                if count >= limit:
                    return


def service_dir(base: Path | int, relative: str | PurePosixPath | Sequence[str]) -> int:
    """A descriptor of a directory of the service's own (its user, not writable by others)
    at ``relative``, made if missing; one a task put there instead is moved aside first."""
    parts = parts_of(relative)
    if not parts:
        raise Refused("", "no folder named")
    with directory(base, parts[:-1]) as parent:
        name = parts[-1]
        for _ in range(3):
            with suppress(FileExistsError):
                os.mkdir(name, SERVICE_DIR_MODE, dir_fd=parent)
            try:
                fd = os.open(name, DIRECTORY_FLAGS, dir_fd=parent)
            except OSError:
                fd = -1
            if fd >= 0:
                status = os.fstat(fd)
                if status.st_uid == os.geteuid() and not status.st_mode & 0o022:
                    return fd
                os.close(fd)
            _move_aside(parent, name)
        raise Refused("/".join(parts), "a task keeps putting its own folder here")


def _move_aside(parent: int, name: str) -> None:
    """Move a planted entry out of the way, keeping it for whoever investigates."""
    aside = f".{name}.planted-{int(time.time())}-{secrets.token_hex(3)}"
    os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=parent)


def open_own(dir_fd: int, name: str, *, append: bool = True, mode: int = 0o640) -> int:
    """A descriptor for writing a file of the service's own in a folder of its own: created
    if missing, never through a link, refused if it is not a regular file of the service."""
    parts_of([name])
    flags = WRITE_FLAGS | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(name, flags, mode, dir_fd=dir_fd)
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid():
        os.close(fd)
        raise Refused(name, "not a regular file of the service")
    os.set_blocking(fd, True)
    return fd


def write_atomic_at(dir_fd: int, name: str, data: bytes | str, mode: int = 0o640) -> None:
    """Write a file in a directory by descriptor: a new hidden file, then a rename over ``name``,
    so a reader sees the old file or the whole new one and no link is ever written through."""
    parts_of([name])
    temporary = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temporary, WRITE_FLAGS | os.O_CREAT | os.O_EXCL, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def create_once_at(dir_fd: int, name: str, data: bytes | str, mode: int = 0o640) -> bool:
    """Write ``name`` unless it exists (whatever it is); whether it was written."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        write_atomic_at(dir_fd, name, data, mode)
        return True
    return False


def make_dirs(
    base: Path | int, relative: str | PurePosixPath | Sequence[str], mode: int = 0o755
) -> int:
    """A descriptor of the directory ``relative`` below ``base``, each missing component made
    (``mode``), none followed if it is a link; the caller closes it."""
    fd = open_dir(base)
    try:
        for part in parts_of(relative):
            with suppress(FileExistsError):
                os.mkdir(part, mode, dir_fd=fd)
            child = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def own_dir(base: Path | int, relative: str | PurePosixPath | Sequence[str]) -> int:
    """A descriptor of an existing directory of the service's own (its user, not writable by
    others), walked without links; ``Refused`` for one a task made or replaced."""
    fd = open_dir(base, relative)
    status = os.fstat(fd)
    if status.st_uid != os.geteuid() or status.st_mode & 0o022:
        os.close(fd)
        raise Refused("/".join(parts_of(relative)), "not a folder of the service")
    return fd


def read_own(dir_fd: int, name: str, cap: int) -> bytes:
    """At most ``cap`` bytes of a regular file of the service's own user in a directory;
    ``Refused`` for a file of another user (a task's)."""
    with open_regular(dir_fd, name) as file:
        if os.fstat(file.fileno()).st_uid != os.geteuid():
            raise Refused(name, "not a file of the service")
        return file.read(max(0, cap))
