"""Writes another process may read: a temporary file in the same directory, then a rename."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """A name beside ``path`` no one else uses; hidden, so listings skip it."""
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")


def write_atomic(path: Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` so a reader sees the old file or the whole new one; a new
    file gets ``mode`` (less the umask)."""
    temporary = temporary_name(path)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path
