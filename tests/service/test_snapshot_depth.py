"""An extraction that fails leaves nothing behind, however deep the archive made its tree:
the temporary folder is removed without recursion (shutil's raised RecursionError past about
a thousand levels, which ``ignore_errors`` does not catch, and left the tree in the store)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from runs.planning import snapshots
from runs.planning.snapshots import Limit, SnapshotError
from tests.floods import deep_tree, tmpfs

LIMIT = Limit(2**20, "too large")


def link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


def folder(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info


def test_an_archive_nested_past_the_recursion_limit_leaves_nothing_when_refused(
    tmp_path: Path,
) -> None:
    """Names are at most 1024 characters (512 levels), but a name through a link inside the
    tree lands deeper: two links make a tree over 1,500 levels deep (as deep as PATH_MAX lets
    the extraction go), then a member twice refuses the archive."""
    chain = "/".join(["a"] * 511)
    members = [
        folder("a/" + chain),
        link("l1", "a/" + chain),
        folder("l1/" + chain),
        link("l2", "l1/" + chain),
        folder("l2/" + chain),
        link("twice", "a"),
        link("twice", "a"),
    ]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info in members:
            tar.addfile(info)
    buffer.seek(0)
    with tmpfs(tmp_path / "fs") as fs:
        target = fs / "snapshots" / "digest"
        target.parent.mkdir()
        with pytest.raises(SnapshotError, match="twice"):
            snapshots._extract_once(buffer, target, LIMIT)
        assert list(target.parent.iterdir()) == []


def test_a_tree_3000_folders_deep_is_removed_when_its_extraction_fails(
    tmp_path: Path, monkeypatch
) -> None:
    def extract(archive, destination: Path, limit=None) -> int:
        deep_tree(destination, 3000)
        raise SnapshotError("refused at the end")

    monkeypatch.setattr(snapshots, "extract", extract)
    with tmpfs(tmp_path / "fs") as fs:
        target = fs / "snapshots" / "digest"
        target.parent.mkdir()
        (fs / "snapshots" / "kept").write_text("beside")
        with pytest.raises(SnapshotError, match="refused at the end"):
            snapshots._extract_once(io.BytesIO(), target, LIMIT)
        assert [p.name for p in target.parent.iterdir()] == ["kept"]
