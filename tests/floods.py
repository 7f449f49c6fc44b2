"""Floods on a filesystem of the test's own: a small tmpfs or ext4 (as root), and trees too deep
to name.

This machine's disk makes a folder in about a millisecond, so trees of thousands of entries go
on a tmpfs, mounted for the test and always unmounted after it. Without root (no mount) the
test's own folder is used instead, slower.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int = 64, inodes: int = 200_000) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` and ``inodes`` on ``path`` for the block (root only; else the
    folder itself)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield path
        return
    options = f"size={size_mb}m,nr_inodes={inodes},mode=755"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def ext4(path: Path, size_mb: int, *mkfs_options: str) -> Iterator[Path]:
    """An ext4 of ``size_mb`` (made with ``mkfs_options``) mounted on ``path`` for the block,
    from an image in memory: a sync on this machine's disk can take seconds. Root only."""
    image = Path(tempfile.mkdtemp(dir="/dev/shm")) / "disk.img"
    path.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["truncate", "-s", f"{size_mb}M", str(image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", *mkfs_options, str(image)], check=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(path)], check=True)
        try:
            yield path
        finally:
            subprocess.run(["umount", "-l", str(path)], check=False)
    finally:
        shutil.rmtree(image.parent, ignore_errors=True)


def deep_tree(top: Path | int, levels: int, name: str = "d") -> None:
    """A chain of ``levels`` folders below ``top`` with a file in the deepest, made by
    descriptor (a path that long could not be named)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY) if isinstance(top, Path) else os.dup(top)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("bottom.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)


DEEP_TREE_SH = "i=0; while [ $i -lt {levels} ]; do mkdir d && cd d || exit 1; i=$((i+1)); done"
"""A shell loop that makes a chain of ``levels`` folders below the current one."""
