"""Source snapshots: shadow trees, editable installs with a restart; inputs staged."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness.errors import EXIT_TERMINATED
from harness.sources import install_editable, shadow_tree, stage
from tests.harness.processes import clean_environ, finish
from tests.harness.task_dirs import make_task
from tests.polling import wait_for


def _tree(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "sub" / "data.txt").write_text("data")
    os.symlink("sub", root / "pkg" / "alias")
    os.symlink("__init__.py", root / "pkg" / "init-link.py")
    return root


def _fingerprint(root: Path) -> str:
    """Names, kinds, contents and modification times of a tree: any write changes it."""
    digest = hashlib.sha256()
    for directory, dirs, files in sorted(os.walk(root)):
        for name in sorted(dirs + files):
            path = Path(directory) / name
            info = path.lstat()
            digest.update(f"{path.relative_to(root)} {info.st_mode} {info.st_mtime_ns}".encode())
            if path.is_file() and not path.is_symlink():
                digest.update(path.read_bytes())
    return digest.hexdigest()


def test_a_shadow_tree_has_real_directories_and_links_to_the_files(tmp_path: Path) -> None:
    source = _tree(tmp_path / "source")
    target = tmp_path / "shadow"
    (target / "stale").mkdir(parents=True)

    assert shadow_tree(source, target) == target

    assert not (target / "stale").exists()  # replaced
    assert (target / "pkg").is_dir() and not (target / "pkg").is_symlink()
    init = target / "pkg" / "__init__.py"
    assert init.is_symlink() and init.resolve() == (source / "pkg" / "__init__.py").resolve()
    assert os.readlink(target / "pkg" / "alias") == "sub"  # a link stays the same link
    assert os.readlink(target / "pkg" / "init-link.py") == "__init__.py"
    (target / "pkg" / "build.txt").write_text("a build writes here")
    assert not (source / "pkg" / "build.txt").exists()


def test_install_editable_does_nothing_without_snapshots(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    install_editable([], python="/nonexistent/python", root=root)

    assert not root.exists()


def test_a_tree_pip_cannot_install_fails_with_pips_reason_not_the_command(
    tmp_path: Path,
) -> None:
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "sim.py").write_text("print(1)\n")

    with pytest.raises(subprocess.CalledProcessError) as failed:
        install_editable([str(snapshot)], root=tmp_path / "sources")

    said = str(failed.value)
    assert said.startswith("pip install -e exited 1: ERROR:")
    assert "does not appear to be a Python project" in said and "--no-index" not in said


def test_stage_copies_files_and_trees_relative_to_store_and_scratch(tmp_path: Path) -> None:
    store, scratch = tmp_path / "store", tmp_path / "scratch"
    (store / "runs" / "out" / "deep").mkdir(parents=True)
    (store / "runs" / "out" / "deep" / "x.csv").write_text("x")
    (store / "one.txt").write_text("one")
    absolute = tmp_path / "elsewhere.txt"
    absolute.write_text("abs")

    stage(
        [
            ("runs/out", "inputs/table"),
            ("one.txt", "single/one.txt"),
            (str(absolute), str(tmp_path / "copied.txt")),
        ],
        store,
        scratch,
    )

    assert (scratch / "inputs" / "table" / "deep" / "x.csv").read_text() == "x"
    assert (scratch / "single" / "one.txt").read_text() == "one"
    assert (tmp_path / "copied.txt").read_text() == "abs"
    with pytest.raises(FileNotFoundError, match="missing"):
        stage([("missing", "m")], store, scratch)


def test_stage_never_follows_a_link_out_of_its_source_nor_opens_a_fifo(tmp_path: Path) -> None:
    store, scratch = tmp_path / "store", tmp_path / "scratch"
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("root's")
    out = store / "runs" / "r" / "tasks" / "a" / "out"
    out.mkdir(parents=True)
    (out / "kept.txt").write_text("kept")
    (out / "key").symlink_to(secret / "key")
    (out / "dir").symlink_to(secret)
    os.mkfifo(out / "fifo")

    stage([("runs/r/tasks/a/out", "inputs/x")], store, scratch)

    copied = scratch / "inputs" / "x"
    assert (copied / "kept.txt").read_text() == "kept"
    assert (copied / "key").is_symlink() and (copied / "dir").is_symlink()
    assert not (copied / "fifo").exists()
    linked = store / "runs" / "r" / "tasks" / "b"
    linked.mkdir()
    (linked / "out").symlink_to(secret)
    with pytest.raises(OSError, match="link"):
        stage([("runs/r/tasks/b/out", "inputs/y")], store, scratch)
    assert not (scratch / "inputs" / "y").exists()


BACKEND = """
\"\"\"A PEP 517 backend of its own, so the test needs no package beyond pip.\"\"\"
import base64, hashlib, os, zipfile

NAME, VERSION = "tinypkg", "0.1"
INFO = f"{NAME}-{VERSION}.dist-info"
METADATA = f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n"
WHEEL = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    os.makedirs(os.path.join(metadata_directory, INFO))
    for name, text in (("METADATA", METADATA), ("WHEEL", WHEEL)):
        with open(os.path.join(metadata_directory, INFO, name), "w") as handle:
            handle.write(text)
    return INFO


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    with open("build-stamp.txt", "w") as handle:  # backends write into the tree they build
        handle.write("built")
    files = {
        f"{NAME}.pth": os.path.abspath("src") + "\\n",
        f"{INFO}/METADATA": METADATA,
        f"{INFO}/WHEEL": WHEEL,
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{INFO}/RECORD"] = "\\n".join([*record, f"{INFO}/RECORD,,"]) + "\\n"
    wheel = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel
"""
PROBE = """
import json, os, sys, threading
from harness.report import harness_started
from harness.sources import install_sources
started = harness_started()
print("started", repr(started), file=sys.stderr, flush=True)
install_sources(os.environ, threading.Event())   # installs, then restarts this script
import tinypkg
print(json.dumps({"value": tinypkg.VALUE, "file": tinypkg.__file__, "started": started,
                  "installed": os.environ.get("SIMRUN_SOURCES_INSTALLED")}))
"""


def _snapshot(root: Path, backend: str = BACKEND) -> Path:
    """A source tree of ``tinypkg`` (``VALUE`` 42) built by ``backend``."""
    snapshot = root / "snapshot"
    (snapshot / "src" / "tinypkg").mkdir(parents=True)
    (snapshot / "src" / "tinypkg" / "__init__.py").write_text("VALUE = 42\n")
    (snapshot / "backend.py").write_text(backend)
    (snapshot / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        '[project]\nname = "tinypkg"\nversion = "0.1"\n'
    )
    return snapshot


def _venv(root: Path) -> Path:
    """A venv of its own (never install into the project's), seeing the project's packages;
    its interpreter."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    project = sysconfig.get_path("purelib")
    (site / "project.pth").write_text(f"import site; site.addsitedir({project!r})\n")
    return venv / "bin" / "python"


def test_install_sources_installs_a_read_only_snapshot_and_restarts_into_it(
    tmp_path: Path,
) -> None:
    snapshot = _snapshot(tmp_path)
    for directory, _, files in os.walk(snapshot):
        for name in files:
            os.chmod(Path(directory) / name, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        os.chmod(directory, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    before = _fingerprint(snapshot)
    python = _venv(tmp_path)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_")},
        "SIMRUN_EDITABLE": str(snapshot),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    (tmp_path / "tmp").mkdir()

    result = subprocess.run(
        [str(python), "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["value"] == 42 and seen["installed"] == "1"
    assert "simrun-sources" in seen["file"]  # from the shadow tree, not the snapshot path
    assert _fingerprint(snapshot) == before
    # The start of the harness is the one before the install, kept across the restart.
    first, *_ = (line for line in result.stderr.splitlines() if line.startswith("started"))
    assert first == f"started {seen['started']!r}"


def test_a_sigterm_during_the_install_of_the_sources_skips_the_restart(
    tmp_path: Path, store: Path, logs: Path
) -> None:
    """The install ends (pip is not the one signalled) and the worker exits 143 at once: a
    restart would have run the units in an interpreter that never saw the SIGTERM."""
    building, go = tmp_path / "building", tmp_path / "go"
    wait = (
        f"    open({str(building)!r}, 'w').close()\n"
        f"    while not os.path.exists({str(go)!r}):\n"
        "        time.sleep(0.01)\n"
    )
    backend = BACKEND.replace("import base64", "import time, base64").replace(
        "def build_editable(wheel_directory, config_settings=None, metadata_directory=None):\n",
        "def build_editable(wheel_directory, config_settings=None, metadata_directory=None):\n"
        + wait,
    )
    snapshot = _snapshot(tmp_path, backend)
    task_dir = make_task(store, "squares", {"n": 4})
    (tmp_path / "tmp").mkdir()
    env = clean_environ(
        SIMRUN_TASK_DIR=str(task_dir),
        SIMRUN_ROLE="base",
        SIMRUN_CORES="1",
        SIMRUN_EDITABLE=str(snapshot),
        TMPDIR=str(tmp_path / "tmp"),
    )
    with (logs / "w0.log").open("ab") as output:
        worker = subprocess.Popen(
            [str(_venv(tmp_path)), "-m", "harness.worker"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_for(building.exists, what="the build of the sources to begin")
    worker.send_signal(signal.SIGTERM)  # to the worker alone: its pip goes on
    wait_for(lambda: not _pending(worker.pid, signal.SIGTERM), what="the SIGTERM delivered")
    go.touch()

    assert finish(worker, logs / "w0.log") == EXIT_TERMINATED
    assert "installed the sources" in (logs / "w0.log").read_text()  # the install ended
    assert not (task_dir / "progress.jsonl").exists()  # and no unit ran after it


def _pending(pid: int, signum: int) -> bool:
    """Whether a signal waits to be delivered to a process (its ``SigPnd`` or ``ShdPnd``)."""
    fields = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    pending = int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)
    return bool(pending & (1 << (signum - 1)))
