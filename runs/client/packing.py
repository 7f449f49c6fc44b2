"""Pack a local source tree into a tar.gz snapshot the server can store and the pods install.

The archive holds the tree's files at its root, in a fixed order with fixed owners and times,
so the same files make the same archive and hence the same snapshot id. What never belongs
in a source tree (version control, caches, virtual environments, build output) is left out.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".hypothesis",
        "node_modules",
        "build",
        "dist",
    }
)
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
FIXED_MTIME = 946684800
"""2000-01-01: a wheel built from the tree needs times after 1980."""


def _kept(name: str, directory: bool) -> bool:
    if directory:
        return name not in SKIPPED_DIRS and not name.endswith(".egg-info")
    return not name.endswith(SKIPPED_SUFFIXES)


def tree_files(root: Path) -> list[Path]:
    """The files and links of a tree that go into its snapshot, sorted."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if _kept(d, True))
        here = Path(folder)
        found.extend(here / d for d in dirs if (here / d).is_symlink())
        found.extend(here / f for f in sorted(files) if _kept(f, False))
    return sorted(found)


def _info(tar: tarfile.TarFile, path: Path, name: str) -> tarfile.TarInfo:
    info = tar.gettarinfo(str(path), arcname=name)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = FIXED_MTIME
    if info.isreg():
        info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def pack(root: Path) -> bytes:
    """The tar.gz of a source tree: reproducible for the same files."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in tree_files(root):
            name = path.relative_to(root).as_posix()
            info = _info(tar, path, name)
            if info.isreg():
                with path.open("rb") as file:
                    tar.addfile(info, file)
            elif info.issym():
                tar.addfile(info)
    return buffer.getvalue()
