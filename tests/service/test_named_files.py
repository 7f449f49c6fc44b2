"""The programs and files a command names are part of its task's key: a changed script or a
recompiled binary is never reused, by a resume or by the cache, and the resume says why; what
they hold is read without belief (no FIFO waited on, no link of the store followed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.ledger import Ledger
from runs.backends.base import TaskRecord
from runs.backends.fake import FakeBackend
from runs.common import store
from runs.models import Reuse, Run, Task
from runs.planning import programs
from tests.service.controller_support import (  # noqa: F401
    fake,
    fresh,
    home,
    launch,
    sent,
    task_dir,
)
from tests.service.test_resume import edited, resumed, row, submitted_run, succeeded, sweep_failed

pytestmark = pytest.mark.django_db


def sweep_of(script: Path) -> dict[str, Any]:
    """A command sweep of a Python script named by its path, as a scientist writes one."""
    return {
        "tasks": {
            "sweep": {
                "command": ["python", str(script), "--temperature", "{T}"],
                "sweep": {"T": {"range": [0, 12]}},
            }
        }
    }


def pipeline_of(program: str) -> dict[str, Any]:
    """A command task running ``program`` and reading a data file by an absolute path, cached."""
    return {
        "cache": True,
        "tasks": {"sim": {"command": [program, "--input=/dev/null/none", "--steps", "3"]}},
    }


def rewrite(path: Path, text: str) -> None:
    """Rewrite a file in place keeping its size and times: only its content tells it changed."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    path.write_text(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def failed_sweep(launch, fake: FakeBackend, spec: dict[str, Any], done: range) -> Run:  # noqa: F811
    run = launch(spec)
    ledger = Ledger.open(task_dir(run, "sweep") / "units", 12, "sweep-w0")
    ledger.write_piece(list(done), [{"v": i} for i in done])
    return sweep_failed(fake, run)


def test_a_resume_of_a_sweep_whose_script_changed_mixes_nothing_and_says_which_file(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    tmp_path: Path,
):
    script = tmp_path / "crashy.py"
    script.write_text("print(1)\n")
    source = failed_sweep(launch, fake, sweep_of(script), range(0, 8))
    unchanged = resumed(source)
    assert (row(unchanged, "sweep").reuse, row(unchanged, "sweep").units_reused) == (
        Reuse.UNITS,
        8,
    )

    rewrite(script, "print(2)\n")
    run = resumed(source)

    task = row(run, "sweep")
    assert (task.reuse, task.reused_from, task.units_reused) == (Reuse.NONE, "", None)
    assert task.key != row(source, "sweep").key
    assert task.not_reused == (
        f"not reused from {source.id}/sweep: its program or a file its command names changed "
        f"since: {script}"
    )
    assert not (task_dir(run, "sweep") / "units" / "reused").exists()


def test_a_resume_says_what_else_changed_when_no_file_did(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    tmp_path: Path,
):
    script = tmp_path / "relax.py"
    script.write_text("print(1)\n")
    source = failed_sweep(launch, fake, sweep_of(script), range(0, 4))

    other = edited(sweep_of(script), lambda d: d["tasks"]["sweep"].update(failures={"allowed": 2}))
    run = resumed(source, other)

    assert row(run, "sweep").not_reused == (
        f"not reused from {source.id}/sweep: its settings or command changed"
    )


@pytest.mark.parametrize("named", ["path", "PATH"])
def test_a_recompiled_binary_is_not_taken_from_the_cache_nor_from_a_resume(
    named: str,
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    owner,
    tmp_path: Path,
    monkeypatch,
):
    binary = tmp_path / "bin" / "ising-sim"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\necho v1\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{binary.parent}:{os.environ['PATH']}")
    spec = pipeline_of(str(binary) if named == "path" else binary.name)
    source = succeeded(launch, fake, spec)
    assert row(source, "sim").named_files[str(binary)].startswith("sha256:")
    assert row(submitted_run(owner, spec), "sim").reused_from == f"{source.id}/sim"

    rewrite(binary, "#!/bin/sh\necho v2\n")  # recompiled in place: same size, same times
    cached = submitted_run(owner, spec)
    assert (row(cached, "sim").reuse, row(cached, "sim").reused_from) == (Reuse.NONE, "")
    binary.unlink()
    binary.write_text("#!/bin/sh\necho v3\n")  # rebuilt: a new file under the same name
    binary.chmod(0o755)
    again = resumed(source)
    assert row(again, "sim").reuse == Reuse.NONE
    assert str(binary) in row(again, "sim").not_reused


SHELL_LINES = {
    "by its absolute path": "{script} --temperature {{T}}",
    "opened by an interpreter after cd": "cd {folder} && python3 {name} --temperature {{T}} > o",
    "run from the folder cd led to": "set -e; cd {folder}; ./{name} {{T}} 2>&1",
}


@pytest.mark.parametrize("line", SHELL_LINES.values(), ids=SHELL_LINES.keys())
def test_a_script_a_shell_line_runs_is_part_of_the_key_under_resume_and_cache(
    line: str,
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    owner,
    tmp_path: Path,
):
    script = tmp_path / "relax.sh"
    script.write_text("echo 1\n")
    command = ["sh", "-c", line.format(script=script, folder=tmp_path, name=script.name)]
    sweep = {"tasks": {"sweep": {"command": command, "sweep": {"T": {"range": [0, 12]}}}}}
    source = failed_sweep(launch, fake, sweep, range(0, 8))
    assert row(source, "sweep").named_files[str(script)].startswith("sha256:")
    cached = {
        "cache": True,
        "tasks": {"sim": {"command": [*command[:2], command[2].replace("{T}", "1")]}},
    }
    done = succeeded(launch, fake, cached)
    assert row(submitted_run(owner, cached), "sim").reused_from == f"{done.id}/sim"

    rewrite(script, "echo 2\n")
    again = resumed(source)
    assert (row(again, "sweep").reuse, row(again, "sweep").units_reused) == (Reuse.NONE, None)
    assert row(again, "sweep").not_reused.endswith(f"changed since: {script}")
    assert row(submitted_run(owner, cached), "sim").reuse == Reuse.NONE


# What a named path holds, read without belief.


def test_the_paths_a_command_names_are_its_program_and_its_absolute_arguments(tmp_path: Path):
    sh = programs.named_paths(["sh", "-c", "true"])
    assert len(sh) == 1 and sh[0].endswith("/sh")
    assert programs.named_paths(
        ["python", "/a/b.py", "--in=/data/x.csv", "rel.txt", "{out}/r.json", "/a/b.py"]
    ) == ["/a/b.py", "/data/x.csv"]
    assert programs.named_paths(["/opt/sim/../sim/bin/run", "/in//file"]) == [
        "/opt/sim/bin/run",
        "/in/file",
    ]
    assert programs.named_paths([]) == []


def test_a_shell_line_names_each_program_and_file_it_runs_in_the_folder_it_runs_in(
    tmp_path: Path,
):
    (tmp_path / "run.sh").write_text("echo\n")
    (tmp_path / "params.toml").write_text("T = 1\n")
    line = (
        f"set -e; cd {tmp_path} && X=1 exec nice -n 5 ./run.sh params.toml --T {{T}} "
        'missing.txt < /data/in.csv > /data/out.log 2>&1 | /opt/bin/filter "$1"; echo done'
    )
    sh, *named = programs.named_paths(["sh", "-c", line, "sh", "/data/arg.txt"])
    assert sh.endswith("/sh")
    assert named == [
        "/data/arg.txt",
        str(tmp_path / "run.sh"),
        str(tmp_path / "params.toml"),
        "/data/in.csv",
        "/opt/bin/filter",
    ]
    assert programs.named_paths(["bash", "-lc", "./a.sh; 'open"]) == programs.named_paths(["bash"])


def test_a_fifo_a_folder_and_a_missing_file_are_said_never_read(tmp_path: Path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert programs.digest(str(fifo)) == "not-a-file"  # returns: no writer waited for
    assert programs.digest(str(tmp_path)) == "folder"
    assert programs.digest(str(tmp_path / "none")) == "absent"
    assert programs.digest(str(tmp_path / "none" / "deeper")) == "absent"


def test_a_file_larger_than_what_is_read_is_keyed_by_its_status(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(programs, "MAX_HASHED", 8)
    big = tmp_path / "big.bin"
    big.write_bytes(b"0123456789")
    first = programs.digest(str(big))
    assert first.startswith("stat:10:")
    big.write_bytes(b"9876543210")
    assert programs.digest(str(big)) != first


def test_what_one_submission_reads_is_bounded_the_files_past_it_keyed_by_status(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(programs, "MAX_HASHED_PER_RUN", 15)
    named = []
    for name in "abc":
        (tmp_path / name).write_bytes(b"0123456789"[:6])
        named.append(str(tmp_path / name))
    records = {
        "t": TaskRecord(id="t", kind="command", command=["/bin/true", *named[:2]]),
        "u": TaskRecord(id="u", kind="command", command=["/bin/true", named[0], named[2]]),
    }
    files = programs.named_files(records)
    kinds = {path: files[task][path].split(":")[0] for task in files for path in files[task]}
    # /bin/true first (its bytes count too, over the bound alone), then 6 + 6 bytes of 15.
    assert [kinds[path] for path in named] == ["sha256", "sha256", "stat"]


def test_a_file_the_service_may_not_read_is_keyed_by_its_status(tmp_path: Path, monkeypatch):
    locked = tmp_path / "locked"
    locked.write_text("x")
    opened = os.open

    def refused(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == str(locked):
            raise PermissionError(13, "Permission denied", path)
        return opened(path, flags, *args, **kwargs)

    monkeypatch.setattr(programs.os, "open", refused)
    first = programs.digest(str(locked))
    assert first.startswith("stat:1:")
    locked.write_text("y")
    assert programs.digest(str(locked)) != first  # its times moved


def test_a_link_of_the_store_is_never_followed_and_a_link_into_it_never_the_same(
    tmp_path: Path, settings
):
    secret = tmp_path / "secret"
    secret.write_text("not the task's")
    out = store.root() / "runs" / "r1" / "tasks" / "t" / "out"
    out.mkdir(parents=True)
    (out / "prog").symlink_to(secret)
    (out / "real").write_text("a task's program")
    assert programs.digest(str(out / "real")).startswith("sha256:")
    (out.parent / "linked").symlink_to(out)
    for through_a_link in (out / "prog", out.parent / "linked" / "real"):
        first, second = programs.digest(str(through_a_link)), programs.digest(str(through_a_link))
        assert first.startswith("link:") and first != second  # never followed, never the same

    outside = tmp_path / "mine"
    outside.symlink_to(out / "real")
    first, second = programs.digest(str(outside)), programs.digest(str(outside))
    assert first.startswith("link-into-store:") and first != second


def test_each_task_keeps_what_its_files_held_at_submission(launch, tmp_path: Path):  # noqa: F811
    script = tmp_path / "model.py"
    script.write_text("print('model')\n")
    run = launch(sweep_of(script))
    files = Task.objects.get(run=run, task_id="sweep").named_files
    assert list(files) == [str(script)]
    assert files[str(script)] == programs.digest(str(script))


# The image a task runs in.

PINNED = "python@sha256:" + "c" * 64


def test_an_image_is_keyed_by_the_digest_its_tag_has_and_a_moved_tag_is_never_reused(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    owner,
    monkeypatch,
):
    registry = {"python:3.12": "sha256:" + "a" * 64}
    asked: list[str] = []

    def image_digest(ref: str) -> str | None:
        asked.append(ref)
        if ref not in registry:
            raise RuntimeError("registry.test answered 503")
        return registry[ref]

    monkeypatch.setattr(fake, "runs_images", True)
    monkeypatch.setattr(fake, "image_digest", image_digest, raising=False)
    sim = {"command": ["/bin/echo", "1"], "image": "python:3.12"}
    spec = {"cache": True, "tasks": {"sim": sim}}
    source = succeeded(launch, fake, spec)
    assert row(source, "sim").named_files["image:python:3.12"] == registry["python:3.12"]
    assert row(submitted_run(owner, spec), "sim").reused_from == f"{source.id}/sim"

    registry["python:3.12"] = "sha256:" + "b" * 64  # the tag moved to another image
    moved = submitted_run(owner, spec)
    assert (row(moved, "sim").reuse, row(moved, "sim").reused_from) == (Reuse.NONE, "")
    assert row(resumed(source), "sim").not_reused == (
        f"not reused from {source.id}/sim: its image changed since, or its digest is not "
        "known: python:3.12 (now sha256:bbbbbbbbbbbb)"
    )

    del registry["python:3.12"]  # the registry cannot say: never the same, never reused
    unknown = succeeded(launch, fake, spec)
    assert row(unknown, "sim").named_files["image:python:3.12"].startswith("unresolved:")
    assert row(submitted_run(owner, spec), "sim").reuse == Reuse.NONE
    assert "python:3.12 (now digest not known)" in row(resumed(unknown), "sim").not_reused

    asked.clear()
    pinned = edited(spec, lambda d: d["tasks"]["sim"].update(image=PINNED))
    first = succeeded(launch, fake, pinned)
    assert row(first, "sim").named_files[f"image:{PINNED}"] == "sha256:" + "c" * 64
    assert row(submitted_run(owner, pinned), "sim").reused_from == f"{first.id}/sim"
    assert asked == []  # a digest in the reference is not asked of the registry


def test_a_backend_that_runs_no_images_keys_none(launch, fake: FakeBackend):  # noqa: F811
    run = launch({"tasks": {"sim": {"command": ["/bin/echo", "1"], "image": "python:3.12"}}})
    assert not [name for name in row(run, "sim").named_files if name.startswith("image:")]
