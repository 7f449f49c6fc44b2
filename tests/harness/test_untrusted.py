"""harness.untrusted: paths a task could have written are walked, never resolved."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from harness import untrusted
from tests.floods import deep_tree, tmpfs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "runs" / "r1" / "out").mkdir(parents=True)
    (tmp_path / "secret").write_text("the service's key")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "key").write_text("another user's file")
    return tmp_path / "root"


def test_a_regular_file_below_the_root_is_read(root: Path) -> None:
    (root / "runs" / "r1" / "out" / "a.txt").write_text("hello")
    assert untrusted.read_bytes(root, "runs/r1/out/a.txt", 100) == b"hello"


@pytest.mark.parametrize("relative", ["../secret", "/etc/passwd", "runs/../../secret", "a\x00b"])
def test_a_path_that_steps_out_is_refused_before_any_open(root: Path, relative: str) -> None:
    with pytest.raises(untrusted.Refused):
        untrusted.read_bytes(root, relative, 100)


FOLDERS = ["runs/r1/out", ""]
"""Where a file is read: deep below the root (walked) and in it (opened by its joined path)."""


def _below(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_link_as_the_file_is_not_followed(root: Path, folder: str) -> None:
    (root / folder / "key").symlink_to(root.parent / "secret")
    with pytest.raises(OSError):
        untrusted.read_bytes(root, _below(folder, "key"), 100)
    with pytest.raises(OSError):
        untrusted.open_file(root, _below(folder, "key"))


@pytest.mark.parametrize("component", ["runs/r1/out", "runs/r1", "runs"])
def test_a_link_as_any_folder_on_the_way_is_not_followed(root: Path, component: str) -> None:
    target = root / component
    target.rename(target.with_name(target.name + ".real"))
    target.symlink_to(root.parent / "elsewhere")
    relative = f"{component}/key" if component == "runs/r1/out" else "runs/r1/out/key"
    with pytest.raises(OSError):
        untrusted.read_bytes(root, relative, 100)
    assert untrusted.list_dir(root, component) == []


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_fifo_is_refused_without_blocking(root: Path, folder: str) -> None:
    os.mkfifo(root / folder / "report.json")
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            untrusted.read_bytes(root, _below(folder, "report.json"), 100)
        except BaseException as error:  # noqa: BLE001 - what the reader met is the result
            outcome.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "the read blocked on a FIFO"
    assert isinstance(outcome[0], untrusted.Refused)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes device nodes")
def test_a_device_is_refused(root: Path) -> None:
    os.mknod(root / "runs" / "r1" / "out" / "zero", stat.S_IFCHR | 0o644, os.makedev(1, 5))
    with pytest.raises(untrusted.Refused):
        untrusted.read_bytes(root, "runs/r1/out/zero", 100)


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize("offset", [0, 3, (1 << 20) + 7])
def test_a_file_is_read_from_its_offset_up_to_its_cap(root: Path, folder: str, offset: int) -> None:
    data = os.urandom((2 << 20) + 11)
    (root / folder / "big.bin").write_bytes(data)
    name = _below(folder, "big.bin")
    assert untrusted.read_bytes(root, name, len(data) + 1, offset=offset) == data[offset:]
    cap = (1 << 20) + 5
    assert untrusted.read_bytes(root, name, cap, offset=offset) == data[offset : offset + cap]
    assert untrusted.read_bytes(root, name, 0, offset=offset) == b""
    with untrusted.open_file(root, name) as file:
        assert file.read() == data


def test_a_sparse_giant_is_read_only_up_to_its_cap(root: Path) -> None:
    giant = root / "runs" / "r1" / "progress.jsonl"
    with open(giant, "wb") as handle:
        handle.truncate(1 << 30)
    assert len(untrusted.read_bytes(root, "runs/r1/progress.jsonl", 4096)) == 4096
    assert untrusted.file_size(root, "runs/r1/progress.jsonl") == 1 << 30


def test_a_walk_lists_regular_files_and_never_enters_a_linked_folder(root: Path) -> None:
    out = root / "runs" / "r1" / "out"
    (out / "sub").mkdir()
    (out / "sub" / "b.csv").write_text("x")
    (out / "a.txt").write_text("y")
    (out / ".hidden").write_text("z")
    (out / "link").symlink_to(root.parent / "secret")
    (out / "dirlink").symlink_to(root.parent / "elsewhere", target_is_directory=True)
    os.mkfifo(out / "fifo")
    walk = untrusted.Walk(root, "runs/r1/out", hidden=False)
    assert list(untrusted.walk_files(walk, 100)) == [("a.txt", 1), ("sub/b.csv", 1)]
    assert walk.cut == ""


def test_a_walk_stops_at_its_limit(root: Path) -> None:
    for i in range(10):
        (root / "runs" / "r1" / "out" / f"{i}.txt").write_text("x")
    assert len(list(untrusted.walk_files(untrusted.Walk(root, "runs/r1/out"), 3))) == 3
    walk = untrusted.Walk(root, "runs/r1/out", limit=4)
    assert len(list(walk)) == 4
    assert walk.cut == "too many: more than 4 entries"


def test_a_tree_3000_folders_deep_is_walked_to_its_bound_and_said_too_deep(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs") as fs:
        (fs / "out").mkdir()
        (fs / "out" / "a.txt").write_text("y")
        deep_tree(fs / "out", 3000)
        walk = untrusted.Walk(fs, "out", depth=8)
        found = [path for path, _ in walk]
    assert found[0] == "a.txt" and len(found) == 1 + 8
    assert walk.cut == "too deep: folders more than 8 levels down"


def test_usage_counts_entries_and_the_blocks_they_take(root: Path) -> None:
    out = root / "runs" / "r1" / "out"
    (out / "sub").mkdir()
    (out / "sub" / "one").write_bytes(b"x" * 8192)
    with open(out / "sparse", "wb") as handle:
        handle.truncate(1 << 30)  # a gigabyte that takes no block
    (out / "link").symlink_to(root.parent / "secret")
    found = untrusted.usage(root, "runs/r1/out")
    assert found.files == 4 and found.cut == ""
    assert 8192 <= found.bytes < 64 * 1024
    assert untrusted.usage(root, "runs/r1/out", limit=2).cut.startswith("too many")
    assert untrusted.usage(root, "runs/r1", skip=frozenset({"out"})).files == 0


def test_a_tree_3000_folders_deep_and_wide_is_removed(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs") as fs:
        top = fs / "scratch"
        top.mkdir()
        deep_tree(top, 3000)
        for i in range(3):
            (top / f"w{i}").mkdir()
            for j in range(1500):
                (top / f"w{i}" / f"{j}").mkdir() if j % 2 else (top / f"w{i}" / f"{j}").touch()
            (top / f"w{i}" / "1" / "x").touch()
        (top / "link").symlink_to(tmp_path, target_is_directory=True)
        (fs / "kept").write_text("outside")
        assert untrusted.remove_tree(fs, ["scratch"])
        assert [p.name for p in fs.iterdir()] == ["kept"]


def test_removing_a_tree_never_climbs_into_a_folder_it_did_not_come_from(tmp_path: Path) -> None:
    top = tmp_path / "scratch"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "c").touch()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep").write_text("another task's file")
    folder = (top / "a" / "b").stat().st_ino
    real_clear = untrusted._clear_files

    def moved_meanwhile(fd: int) -> list[str]:
        """As a process of the same user moves the folder being cleared to elsewhere/."""
        if os.fstat(fd).st_ino == folder:
            os.rename(top / "a" / "b", tmp_path / "elsewhere" / "b")
        return real_clear(fd)

    untrusted._clear_files = moved_meanwhile  # type: ignore[assignment]
    try:
        assert not untrusted.remove_tree(tmp_path, ["scratch"])
    finally:
        untrusted._clear_files = real_clear  # type: ignore[assignment]
    assert (tmp_path / "elsewhere" / "keep").read_text() == "another task's file"


def test_a_folder_a_task_planted_for_the_service_is_moved_aside(root: Path) -> None:
    logs = root / "runs" / "r1" / "logs"
    logs.mkdir(mode=0o777)
    os.chmod(logs, 0o777)  # a folder others may write is not the service's
    (logs / "q-0.log").symlink_to(root.parent / "secret")
    fd = untrusted.service_dir(root, "runs/r1/logs")
    try:
        assert untrusted.entries(fd) == []
        log = untrusted.open_own(fd, "q-0.log")
        os.write(log, b"a line\n")
        os.close(log)
    finally:
        os.close(fd)
    assert (root.parent / "secret").read_text() == "the service's key"
    assert (logs / "q-0.log").read_bytes() == b"a line\n"
    assert [p.name for p in logs.parent.iterdir() if p.name.startswith(".logs.planted-")]


def test_a_file_of_the_service_is_never_written_through_a_link(root: Path) -> None:
    with untrusted.directory(root, "runs/r1") as fd:
        os.symlink(root.parent / "secret", "x.log", dir_fd=fd)
        with pytest.raises(OSError):
            untrusted.open_own(fd, "x.log")
        untrusted.write_atomic_at(fd, "x.log", "replaced")  # a rename replaces the link itself
    assert (root.parent / "secret").read_text() == "the service's key"
    assert (root / "runs" / "r1" / "x.log").read_text() == "replaced"


def test_create_once_leaves_whatever_is_there(root: Path) -> None:
    with untrusted.directory(root, "runs/r1") as fd:
        assert untrusted.create_once_at(fd, "a.log", "first")
        assert not untrusted.create_once_at(fd, "a.log", "second")
    assert (root / "runs" / "r1" / "a.log").read_text() == "first"


def test_make_dirs_makes_what_is_missing_and_never_follows_a_link(root: Path) -> None:
    fd = untrusted.make_dirs(root, "runs/r2/tasks/t")
    os.close(fd)
    assert (root / "runs" / "r2" / "tasks" / "t").is_dir()
    (root / "runs" / "r3").symlink_to(root.parent / "elsewhere")
    with pytest.raises(OSError):
        untrusted.make_dirs(root, "runs/r3/tasks")
    assert not (root.parent / "elsewhere" / "tasks").exists()


def test_a_folder_or_file_not_of_the_service_is_refused_as_its_own(root: Path) -> None:
    logs = root / "runs" / "r1" / "logs"
    logs.mkdir(mode=0o777)
    logs.chmod(0o777)  # as a task's folder would be: writable by others
    with pytest.raises(untrusted.Refused):
        untrusted.own_dir(root, "runs/r1/logs")
    logs.chmod(0o750)
    (logs / "t-0.pid").write_text("{}")
    with untrusted.directory(untrusted.own_dir(root, "runs/r1/logs")) as fd:
        assert untrusted.read_own(fd, "t-0.pid", 10) == b"{}"
        if os.geteuid() == 0:
            os.chown(logs / "t-0.pid", 300001, 300001)
            with pytest.raises(untrusted.Refused):
                untrusted.read_own(fd, "t-0.pid", 10)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing users needs root")
def test_a_folder_that_may_be_crossed_but_not_listed_is_crossed() -> None:
    root = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path lets no other user pass
    root.chmod(0o711)
    (root / "runs" / "r1" / "out").mkdir(parents=True)
    (root / "runs" / "r1" / "out" / "a.txt").write_text("mine")
    (root / "runs").chmod(0o711)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.setgid(300001)
        os.setuid(300001)
        try:
            found = untrusted.read_bytes(root, "runs/r1/out/a.txt", 10)
        except OSError as error:
            found = str(error).encode()
        os.write(write, found)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    shutil.rmtree(root)
    with os.fdopen(read, "rb") as pipe:
        assert pipe.read() == b"mine"
