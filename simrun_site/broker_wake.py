"""What wakes a consumer of the embedded broker (``simrun_site/broker.py``) that waits for a
message: a write to the broker's SQLite file, or its worker told to stop.

A publisher commits a message to the file's write-ahead log: on Linux an inotify watch sees the
write, so a waiting consumer looks at once instead of polling the file. The folder is watched,
not the files, since SQLite removes the log when its last connection closes and makes it anew;
the events of the folder's other files (the service's own database beside it) are read and
dropped. Where inotify is missing (another system, or this user's inotify instances used up),
``watch`` gives None and the consumer polls.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

try:
    import inotify_simple
except ImportError:  # not Linux: the package is installed on Linux only
    inotify_simple = None


class Stop(threading.Event):
    """An event whose setting also ends every ``Writes.wait`` at once.

    It is set by the worker's signal handler while the wait blocks in ``select``, which Python
    resumes after the handler: a byte down a pipe the wait selects on ends it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def set(self) -> None:
        super().set()
        with contextlib.suppress(BlockingIOError):  # the pipe is full: it wakes already
            os.write(self._write, b"1")

    def fileno(self) -> int:
        return self._read


class Writes:
    """The writes to one SQLite file and its write-ahead log, seen through inotify."""

    def __init__(self, inotify: inotify_simple.INotify, database: Path) -> None:
        self._inotify = inotify
        self._names = {database.name, f"{database.name}-wal"}

    def clear(self) -> None:
        """Forget the writes seen so far (the look that follows sees what they wrote)."""
        self._inotify.read(timeout=0)

    def wait(self, timeout_s: float, stop: Stop) -> None:
        """Wait until the file is written after the last ``clear``, ``stop`` is set, or
        ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            ready = select.select([self._inotify, stop], [], [], left)[0]
            if stop in ready:
                return
            if ready and any(self._written(e) for e in self._inotify.read(timeout=0)):
                return

    def _written(self, event: inotify_simple.Event) -> bool:
        """Whether an event may be a write to the file: one of its own, or the kernel's
        queue of events overflowed and dropped some."""
        return event.name in self._names or bool(event.mask & inotify_simple.flags.Q_OVERFLOW)

    def close(self) -> None:
        self._inotify.close()


def watch(database: Path) -> Writes | None:
    """The writes to ``database`` (a SQLite file), or None where inotify cannot watch it."""
    if inotify_simple is None:
        return None
    flags = inotify_simple.flags
    # What may mean a commit: a write, a log made anew or put in place, a close.
    written = flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.CLOSE_WRITE
    try:
        inotify = inotify_simple.INotify(nonblocking=True)
    except (AttributeError, OSError) as error:  # no inotify_init1 in libc, or no instance left
        log.warning("the embedded broker polls: inotify is not available (%s)", error)
        return None
    try:
        inotify.add_watch(database.parent, written)
    except OSError as error:  # no watch left, or no folder
        inotify.close()
        log.warning("the embedded broker polls: cannot watch %s (%s)", database.parent, error)
        return None
    return Writes(inotify, database)
