"""The store's disk as a copy sees it: where a file holds data, and the room a copy may take."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

FREE_RESERVE = 0.05
"""The part of the store's filesystem a copy never takes: others' tasks keep room to write."""


def data_regions(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The ranges of a file that may hold data (``SEEK_DATA``/``SEEK_HOLE``), the whole file
    where the filesystem cannot tell."""
    at = 0
    while at < size:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as error:
            if error.errno == errno.ENXIO:  # no data after ``at``: the rest is a hole
                return
            yield at, size
            return
        yield start, min(end, size)
        at = end


def no_room(folder: int, size: int) -> str | None:
    """Why ``size`` more bytes in ``folder`` (a descriptor) would leave its filesystem with
    less than ``FREE_RESERVE`` free; None when they fit."""
    vfs = os.statvfs(folder)
    free = vfs.f_bavail * vfs.f_frsize
    reserve = int(vfs.f_blocks * vfs.f_frsize * FREE_RESERVE)
    if size <= free - reserve:
        return None
    return (
        f"the store has {max(free, 0) / 2**30:.1f} GiB free, {FREE_RESERVE:.0%} of it kept "
        "for the tasks that run"
    )
