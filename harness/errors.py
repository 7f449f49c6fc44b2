"""The exceptions the harness raises and the exit codes it maps them onto."""

import errno

EXIT_OK = 0
EXIT_FAILED = 3
"""A unit (also one past its time limit), the merge or simrun-exec's command failed."""
EXIT_CONFIGURATION = 4
"""The environment, task.json, the settings or the sources are wrong."""
EXIT_STORAGE = 75
"""The shared store failed (a full disk, a transient NFS error, a file where none belongs):
EX_TEMPFAIL, retried by both backends. Claims were released and the report written where the
store allowed it."""
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ESTALE, errno.EROFS})
"""The errors that are the store's or the scratch disk's, not the task's: exit 75, retried."""
EXIT_KILLED = 137
"""A process of the pool (or simrun-exec's command) was killed: for memory if the report
counts kills of the OOM killer."""
EXIT_TERMINATED = 143
"""Stopped on SIGTERM (an eviction or a cancel); retried."""


class ConfigurationError(Exception):
    """The environment or the settings of a worker are wrong (exit 4)."""


class UnitError(RuntimeError):
    """A unit failed in the function of the task type; it was released (exit 3)."""

    def __init__(self, index: int, reason: str = "") -> None:
        super().__init__(f"unit {index} failed" + (f": {reason}" if reason else ""))
        self.index = index
        self.reason = reason


class StorageError(Exception):
    """The store failed while the worker used it; claims were released (exit 75)."""


class Terminated(Exception):
    """The worker stopped on SIGTERM before its units were done (exit 143)."""
