"""The log of one attempt, capped: its head and its tail are kept, what lies between is dropped
and counted, so no process can fill the disk by printing.

On the local backend the process's stdout and stderr are a pipe its launcher reads (``LogPump``,
a thread). The first half of the budget (``SIMRUN_TASK_LOG_MB``) goes to the log as it comes;
past it, a line says how many bytes were dropped there, and the log goes on growing up to the
budget; then its last quarter of the budget is moved back to just after that line. So the log
never takes more than its budget, always ends with what the process printed last, and a
follower of it sees the head, the count of what was dropped and the latest output.

The Argo backend keeps a pod's log in the store cut the same way (``cut``), from the head and
the last lines the Kubernetes API gives.

Only the standard library, as all of the harness: the local backend's launcher, a script,
imports it without the service's packages.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time

CHUNK = 1 << 16
"""Bytes read from the pipe, or copied in the log, at once."""
POLL_S = 0.2
"""How long the pump waits for output before it looks whether it is asked to stop."""
STOP_WAIT_S = 5.0
"""How long a stopped pump drains a pipe that some process still holds open."""


def marker(dropped: int, head: int, tail: int) -> bytes:
    """The line where a capped log dropped bytes: the same length whatever the count."""
    return (
        f"\n[simrun] {dropped:>20} bytes dropped here: this log keeps its first "
        f"{head} bytes and its last {tail} or more (SIMRUN_TASK_LOG_MB)\n"
    ).encode()


def cut(head: str, tail: str) -> str:
    """A log from its head and its last lines read apart (what lies between is unknown)."""
    return (
        f"{head}\n[simrun] what lies between the first {len(head.encode())} bytes of this log and "
        f"its last {len(tail.encode())} was dropped (SIMRUN_TASK_LOG_MB)\n{tail}"
    )


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class CappedLog:
    """A log file written within a budget of bytes: a descriptor the caller keeps, open for
    reading and writing without ``O_APPEND`` (its tail is moved in place)."""

    def __init__(self, fd: int, budget: int) -> None:
        self.fd = fd
        self.head = max(1, budget // 2)
        self.tail = max(1, budget // 4)
        self.size = os.lseek(fd, 0, os.SEEK_END)
        self.dropped = 0
        self.body: int | None = None
        """Where the tail starts once the head is full (after the marker), None before."""

    def write(self, data: bytes) -> None:
        """Append what the process printed, dropping from the middle beyond the budget."""
        if self.body is None:
            room = self.head - self.size
            if room > 0:
                _write_all(self.fd, data[:room])
                self.size += min(room, len(data))
                data = data[room:]
            if not data:
                return
            _write_all(self.fd, marker(0, self.head, self.tail))
            self.size = self.body = os.lseek(self.fd, 0, os.SEEK_CUR)
        _write_all(self.fd, data)
        self.size += len(data)
        if self.size - self.body > 2 * self.tail:
            self._drop()

    def _drop(self) -> None:
        """Move the last ``tail`` bytes (from a line's start when one begins near there) to
        just after the marker, and count what that drops."""
        assert self.body is not None
        start = self.size - self.tail
        near = os.pread(self.fd, min(CHUNK, self.tail), start)
        newline = near.find(b"\n")
        if newline >= 0:
            start += newline + 1
        kept = self.size - start
        self.dropped += start - self.body
        offset = 0
        while offset < kept:  # forwards: the copy never overtakes what it still has to read
            block = os.pread(self.fd, min(CHUNK, kept - offset), start + offset)
            os.pwrite(self.fd, block, self.body + offset)
            offset += len(block)
        self.size = self.body + kept
        os.ftruncate(self.fd, self.size)
        os.lseek(self.fd, self.size, os.SEEK_SET)
        line = marker(self.dropped, self.head, self.tail)
        os.pwrite(self.fd, line, self.body - len(line))


class LogPump:
    """A thread that copies a process's output from a pipe into its capped log."""

    def __init__(self, read_fd: int, log_fd: int, budget: int) -> None:
        self.read_fd = read_fd
        # A description of the log of its own, without O_APPEND: the tail is moved in place.
        self.log_fd = os.open(f"/proc/self/fd/{log_fd}", os.O_RDWR | os.O_CLOEXEC)
        self.log = CappedLog(self.log_fd, budget)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simrun-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        deadline = None
        while True:
            ready = select.select([self.read_fd], [], [], POLL_S)[0]
            if ready:
                data = os.read(self.read_fd, CHUNK)
                if not data:
                    return
                with contextlib.suppress(OSError):  # a full disk: the output is dropped
                    self.log.write(data)
            elif self._stop.is_set():
                return
            if self._stop.is_set():
                # A process outside the tree (it was handed the pipe) may hold it open.
                deadline = deadline or time.monotonic() + STOP_WAIT_S
                if time.monotonic() > deadline:
                    return

    def stop(self) -> int:
        """Read what is left, end the thread and close the pipe and the log; the bytes the
        log dropped."""
        self._stop.set()
        self._thread.join()
        os.close(self.read_fd)
        os.close(self.log_fd)
        return self.log.dropped
