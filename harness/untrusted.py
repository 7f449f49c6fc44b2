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
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path, PurePosixPath
from typing import BinaryIO

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
PASS_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""A folder only crossed on the way: no read permission needed, no link followed."""
WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
SERVICE_DIR_MODE = 0o750
"""A folder of the service inside a task's: its group (the web, the workers) reads it."""
WALK_DEPTH = 64
"""The folders below its top a walk enters at most; a tree deeper than this is "too deep"."""
WALK_ENTRIES = 10_000
"""The entries a walk looks at, at most; a tree with more is "too many"."""


Relative = str | PurePosixPath | Sequence[str]
"""A path below a trusted folder: text, a pure path, or its components."""


class Refused(OSError):
    """A path that is not what it must be: a link, a FIFO, a device, a folder not the service's."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(errno.EPERM, why, path)


def parts_of(relative: Relative) -> tuple[str, ...]:
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


def open_dir(base: str | Path | int, relative: Relative = ()) -> int:
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
def directory(base: str | Path | int, relative: Relative = ()) -> Iterator[int]:
    """``open_dir`` as a context that closes the descriptor."""
    fd = open_dir(base, relative)
    try:
        yield fd
    finally:
        os.close(fd)


def _regular(name: str, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file ``name`` (of ``dir_fd``), opened for reading, its last
    component not followed; ``Refused`` for anything else. The caller closes it."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(name, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _regular_below(base: str | Path | int, relative: Relative) -> int:
    """``_regular`` of the file ``relative`` below ``base``. One directly in a trusted path
    is opened by its joined path: one call, where the walk makes three."""
    parts = parts_of(relative)
    if not parts:
        raise Refused("", "no file named")
    if len(parts) == 1 and not isinstance(base, int):
        return _regular(os.path.join(base, parts[0]))
    with directory(base, parts[:-1]) as fd:
        return _regular(parts[-1], fd)


def _as_file(fd: int) -> BinaryIO:
    """A file object that owns a descriptor of ``_regular``."""
    try:
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_regular(dir_fd: int, name: str) -> BinaryIO:
    """A regular file of a directory, opened for reading; ``Refused`` for anything else."""
    parts_of([name])
    return _as_file(_regular(name, dir_fd))


def open_file(base: Path | int, relative: Relative) -> BinaryIO:
    """A regular file below ``base``, every component walked without links."""
    return _as_file(_regular_below(base, relative))


def read_bytes(base: str | Path | int, relative: Relative, cap: int, *, offset: int = 0) -> bytes:
    """At most ``cap`` bytes of a regular file below ``base``, from ``offset``: one ``pread``
    of the descriptor, without a file object (a sweep reads one a unit)."""
    fd = _regular_below(base, relative)
    try:
        return os.pread(fd, max(0, cap), offset)  # a regular file reads short only at its end
    finally:
        os.close(fd)


def file_size(base: Path | int, relative: Relative) -> int:
    """The size of a regular file below ``base`` (a sparse file counts its apparent size)."""
    fd = _regular_below(base, relative)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Entry:
    """An entry of a directory as it is, links not followed."""

    name: str
    mode: int
    size: int
    uid: int
    mtime: float
    blocks: int = 0
    """512-byte blocks it takes on its disk (a sparse file counts what it wrote)."""

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


def _entry(name: str, status: os.stat_result) -> Entry:
    return Entry(
        name, status.st_mode, status.st_size, status.st_uid, status.st_mtime, status.st_blocks
    )


def entries(dir_fd: int, limit: int = 100_000) -> list[Entry]:
    """The entries of a directory (at most ``limit``), each as ``lstat`` sees it."""
    found: list[Entry] = []
    with os.scandir(dir_fd) as scan:
        for item in scan:
            try:
                status = item.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append(_entry(item.name, status))
            if len(found) >= limit:
                break
    return found


def list_dir(base: Path | int, relative: Relative, limit: int = 100_000) -> list[Entry]:
    """The entries of a directory below ``base``; empty when it is missing or refused."""
    try:
        with directory(base, relative) as fd:
            return entries(fd, limit)
    except OSError:
        return []


@dataclass
class Walk:
    """The entries below a directory as ``lstat`` sees them, breadth first, each with its path
    relative to the top: at most ``limit`` entries and ``depth`` folders down, links never
    followed (every folder is opened from the top by ``open_dir``, one component at a time)
    and no recursion, so no tree a task made can exhaust the stack or the descriptors. Names
    in ``skip`` at the top, and hidden ones anywhere unless ``hidden``, are left aside.
    After the iteration ``cut`` says which bound stopped it ("too deep: …", "too many: …"),
    empty when it saw everything."""

    base: Path | int
    relative: Relative = ()
    depth: int = WALK_DEPTH
    limit: int = WALK_ENTRIES
    skip: frozenset[str] = frozenset()
    hidden: bool = True
    cut: str = field(default="", init=False)

    def __iter__(self) -> Iterator[tuple[str, Entry]]:
        self.cut = ""
        seen = 0
        queue: list[tuple[str, ...]] = [()]
        with directory(self.base, self.relative) as top:
            for folder in queue:  # the queue grows as folders are found: breadth first
                try:
                    fd = open_dir(top, folder)
                except OSError:
                    continue  # replaced meanwhile (by a link, say): not entered
                try:
                    listed = entries(fd, self.limit - seen + 1)
                finally:
                    os.close(fd)
                for entry in sorted(listed, key=lambda e: e.name):
                    if (not folder and entry.name in self.skip) or (
                        not self.hidden and entry.name.startswith(".")
                    ):
                        continue
                    if seen >= self.limit:
                        self.cut = f"too many: more than {self.limit} entries"
                        return
                    seen += 1
                    yield "/".join((*folder, entry.name)), entry
                    if entry.is_dir:
                        if len(folder) + 1 >= self.depth:
                            self.cut = f"too deep: folders more than {self.depth} levels down"
                        else:
                            queue.append((*folder, entry.name))


def walk_files(walk: Walk, limit: int) -> Iterator[tuple[str, int]]:
    """The regular files a walk finds as (relative path, size), at most ``limit``."""
    count = 0
    for path, entry in walk:
        if entry.is_file:
            yield path, entry.size
            count += 1
            if count >= limit:
                return


@dataclass(frozen=True)
class Usage:
    """What a tree takes of its disk: its entries (inodes), the bytes of their blocks, and
    why the count stopped short (``Walk.cut``: too deep, too many), empty when it is whole."""

    files: int
    bytes: int
    cut: str = ""


def usage(
    base: Path | int,
    relative: Relative = (),
    *,
    depth: int = WALK_DEPTH,
    limit: int = WALK_ENTRIES,
    skip: frozenset[str] = frozenset(),
) -> Usage:
    """The entries and bytes below a directory, counted by a bounded ``Walk``."""
    walk = Walk(base, relative, depth=depth, limit=limit, skip=skip)
    files = blocks = 0
    for _, entry in walk:
        files += 1
        blocks += entry.blocks
    return Usage(files, blocks * 512, walk.cut)


REMOVE_BATCH = 1024
"""The entries of a folder read at once while removing a tree (and its folders remembered)."""


def remove_tree(base: Path | int, relative: Relative) -> bool:
    """Remove a directory and everything below it, however deep or wide: one descriptor at a
    time, entered without links, climbing back by ``..`` only into the folder it came from
    (its device and inode checked), so neither depth nor a folder moved meanwhile (by another
    process of the same user) can stop it or lead it out. Whether it is gone; missing is gone.
    """
    parts = parts_of(relative)
    if not parts:
        raise Refused("", "no folder named")
    try:
        parent = open_dir(base, parts[:-1])
    except FileNotFoundError:
        return True
    try:
        return _remove_below(parent, parts[-1])
    finally:
        os.close(parent)


def _identity(fd: int) -> tuple[int, int]:
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def _remove_below(parent: int, name: str) -> bool:
    """Remove ``name`` of the folder ``parent`` (a descriptor the caller keeps) and its tree."""
    try:
        fd = os.open(name, DIRECTORY_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return True
    except OSError:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent)  # a file or a link in its place
        return True
    # A level per open folder: the folder above it (device, inode), its name there, and the
    # folders of it left to enter.
    levels: list[tuple[tuple[int, int], str, list[str]]] = [(_identity(parent), name, [])]
    try:
        while levels:
            pending = levels[-1][2]
            if not pending:
                pending.extend(_clear_files(fd))
            if pending:
                child_name = pending.pop()
                child = os.open(child_name, DIRECTORY_FLAGS, dir_fd=fd)
                levels.append((_identity(fd), child_name, []))
                os.close(fd)
                fd = child
                continue
            expected, own_name, _ = levels.pop()
            above = os.open("..", DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = above
            if _identity(fd) != expected:
                return False  # moved meanwhile: what is left stays
            with suppress(FileNotFoundError):
                os.rmdir(own_name, dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _clear_files(fd: int) -> list[str]:
    """Remove every entry of a folder that is not a folder, and its empty folders; the names of
    folders that are not empty (at most ``REMOVE_BATCH``), to enter next."""
    while True:
        with os.scandir(fd) as scan:
            batch = [
                (item.name, item.is_dir(follow_symlinks=False))
                for item in islice(scan, REMOVE_BATCH)
            ]
        folders = []
        for name, is_dir in batch:
            try:
                if is_dir:
                    os.rmdir(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as error:
                if not is_dir or error.errno != errno.ENOTEMPTY:
                    raise
                folders.append(name)
        if folders or len(batch) < REMOVE_BATCH:
            return folders


def service_dir(base: Path | int, relative: Relative) -> int:
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


def make_dirs(base: Path | int, relative: Relative, mode: int = 0o755) -> int:
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


def own_dir(base: Path | int, relative: Relative) -> int:
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
