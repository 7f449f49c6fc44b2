"""Extracting a snapshot is safe on any Python 3.11 (Debian's 3.11.2 has no tarfile filters):
each member is checked by hand before it is written, and the tree is readable by every task
user whatever modes the archive gives."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from runs.planning.snapshots import SnapshotError, extract


def member(name: str, kind: bytes = tarfile.REGTYPE, **fields) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    data = fields.pop("data", b"")
    for key, value in fields.items():
        setattr(info, key, value)
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def archive(*members: tuple[tarfile.TarInfo, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    buffer.seek(0)
    return buffer


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The destination; ``outside`` beside it is what an archive must never reach."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("keep")
    destination = tmp_path / "tree"
    destination.mkdir()
    return destination


def untouched(tree: Path) -> bool:
    outside = tree.parent / "outside"
    return sorted(p.name for p in outside.iterdir()) == ["secret"] and (
        (outside / "secret").read_text() == "keep"
    )


def test_a_plain_tree_with_files_dirs_and_inner_links_is_extracted(tree):
    extract(
        archive(
            member("pkg", tarfile.DIRTYPE, mode=0o755),
            member("pkg/a.py", data=b"x = 1\n", mode=0o644),
            member("pkg/run.sh", data=b"#!/bin/sh\n", mode=0o755),
            member("pkg/alias.py", tarfile.SYMTYPE, linkname="a.py"),
            member("pkg/hard.py", tarfile.LNKTYPE, linkname="pkg/a.py"),
            member("deep/er/file", data=b"d"),
        ),
        tree,
    )
    assert (tree / "pkg" / "alias.py").read_text() == "x = 1\n"
    assert (tree / "pkg" / "hard.py").read_text() == "x = 1\n"
    assert (tree / "deep" / "er" / "file").read_bytes() == b"d"
    assert os.access(tree / "pkg" / "run.sh", os.X_OK)
    assert not os.access(tree / "pkg" / "a.py", os.X_OK)


@pytest.mark.parametrize(
    "members",
    [
        pytest.param([member("/tmp/evil", data=b"x")], id="absolute-path"),
        pytest.param([member("../outside/evil", data=b"x")], id="dot-dot"),
        pytest.param([member("a/../../outside/evil", data=b"x")], id="dot-dot-inside"),
        pytest.param(
            [
                member("out", tarfile.SYMTYPE, linkname="../outside"),
                member("out/evil", data=b"x"),
            ],
            id="symlink-out-then-a-file-through-it",
        ),
        pytest.param(
            [member("out", tarfile.SYMTYPE, linkname=str(Path("/").resolve() / "tmp"))],
            id="symlink-absolute",
        ),
        pytest.param(
            [
                member("here", tarfile.SYMTYPE, linkname="."),
                member("up", tarfile.SYMTYPE, linkname="here/.."),
                member("up/outside/evil", data=b"x"),
            ],
            id="symlink-through-a-symlink",
        ),
        pytest.param(
            [member("hard", tarfile.LNKTYPE, linkname="../outside/secret")], id="hardlink-out"
        ),
        pytest.param(
            [
                member("here", tarfile.SYMTYPE, linkname="."),
                member("hard", tarfile.LNKTYPE, linkname="here/../outside/secret"),
            ],
            id="hardlink-through-a-symlink",
        ),
        pytest.param([member("dev", tarfile.CHRTYPE, devmajor=1, devminor=3)], id="char-device"),
        pytest.param([member("blk", tarfile.BLKTYPE, devmajor=8, devminor=0)], id="block-device"),
        pytest.param([member("fifo", tarfile.FIFOTYPE)], id="fifo"),
    ],
)
def test_a_malicious_archive_is_refused_and_writes_nothing_outside(tree, members):
    with pytest.raises(SnapshotError):
        extract(archive(*members), tree)
    assert untouched(tree)


def test_setuid_setgid_sticky_and_group_writable_bits_are_dropped(tree):
    extract(
        archive(
            member("suid", data=b"#!/bin/sh\n", mode=0o6777),
            member("sticky", tarfile.DIRTYPE, mode=0o1777),
            member("private", data=b"p", mode=0o000),
        ),
        tree,
    )
    suid = (tree / "suid").stat().st_mode
    assert not suid & (stat.S_ISUID | stat.S_ISGID | stat.S_IWGRP | stat.S_IWOTH)
    assert suid & stat.S_IXUSR
    assert not (tree / "sticky").stat().st_mode & (stat.S_ISVTX | stat.S_IWOTH)
    assert (tree / "private").read_bytes() == b"p"  # the owner can always read


def test_every_task_user_may_read_the_tree_whatever_modes_the_archive_gives(tree):
    extract(
        archive(
            member("pkg/private.py", data=b"x = 1\n", mode=0o600),
            member("pkg/tool", data=b"#!/bin/sh\n", mode=0o700),
            member("closed", tarfile.DIRTYPE, mode=0o700),
        ),
        tree,
    )
    modes = {
        path: stat.S_IMODE((tree / path).stat().st_mode)
        for path in ("pkg", "pkg/private.py", "pkg/tool", "closed")
    }
    assert modes == {"pkg": 0o755, "pkg/private.py": 0o644, "pkg/tool": 0o755, "closed": 0o755}
