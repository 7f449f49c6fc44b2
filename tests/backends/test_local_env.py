"""local_env: a run's venv of its sources, installed with one line in the log and pip's reason
when it fails, and its mark of a made venv never written through a link its build planted."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from harness.sources import PIP_LOG
from runs.backends.local import builds, wall_disk
from runs.backends.local import env as local_env
from tests.floods import deep_tree, tmpfs
from tests.walkthrough import PACKAGE, write_walkthrough


def test_a_link_planted_as_the_ready_mark_is_not_followed(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "elsewhere" / "created-by-root"
    target.parent.mkdir()

    def build(directory: Path, snapshots: list[Path], *_: object) -> None:
        # The sources' build code runs as the task user, who owns the venv: it plants a link.
        directory.mkdir()
        (directory / local_env.READY).symlink_to(target)

    monkeypatch.setattr(local_env, "isolated", build)
    with contextlib.suppress(OSError):  # refused: not marked ready, made again next time
        local_env.ensure(tmp_path / "envs" / "run", [])
    assert not target.exists()
    assert not local_env._ready(tmp_path / "envs" / "run")


def test_a_venv_its_build_left_3000_folders_deep_is_made_again(tmp_path: Path, monkeypatch) -> None:
    """A build that failed (or was stopped) leaves the task user's tree unmarked; the next
    ``ensure`` in the root launcher removes it. shutil's recursive removal raised RecursionError
    (which ``ignore_errors`` does not catch) at this depth: the attempt was lost."""
    made = []

    def build(directory: Path, snapshots: list[Path], *_: object) -> None:
        directory.mkdir()
        made.append(directory)

    monkeypatch.setattr(local_env, "isolated", build)
    with tmpfs(tmp_path / "fs") as fs:
        venv = fs / "envs" / "run"
        venv.mkdir(parents=True)
        deep_tree(venv, 3000)
        (fs / "kept").write_text("beside")
        local_env.ensure(venv, [])
        assert made == [venv] and local_env._ready(venv)
        assert sorted(p.name for p in venv.iterdir()) == [local_env.READY]
        assert (fs / "kept").read_text() == "beside"


def test_sources_pip_cannot_build_fail_with_pips_reason_not_the_command(tmp_path: Path) -> None:
    """The message a run's process gets when its venv cannot be made ("could not be started:
    …") is pip's reason, not the command line of the build."""
    tree = tmp_path / "snapshot"
    tree.mkdir()
    (tree / "pyproject.toml").write_text("[project]\nname = 'sim'\nversion = 'x y'\n")
    builder = builds.Builder(env=builds.build_env(tmp_path))

    with pytest.raises(subprocess.CalledProcessError) as failed:
        local_env.isolated(tmp_path / "venv", [tree], builder)

    said = str(failed.value)
    assert said.startswith("pip install -e exited 1: ") and "project.version" in said
    assert "Traceback" not in said and sys.executable not in said


def test_installing_sources_writes_one_line_and_keeps_pips_output(tmp_path: Path, capfd) -> None:
    write_walkthrough(tmp_path)
    venv = tmp_path / "venv"
    local_env.ensure(venv, [tmp_path / PACKAGE])
    out = capfd.readouterr().out
    assert len(out.splitlines()) == 1 and "installed the sources" in out, out
    assert "Successfully installed decay-sim" in (venv / "sources" / PIP_LOG).read_text()


def test_a_failed_install_shows_the_tail_of_pips_output(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "pyproject.toml").write_text("[project]\nname = 'broken'\nversion = 'x y'\n")
    with pytest.raises(subprocess.CalledProcessError) as failed:
        local_env.ensure(tmp_path / "venv", [package])
    assert "`project.version` must be pep440" in str(failed.value.output)
    # Said by the build behind its wall, as a task user's is: in the failure it raises.
    assert "pip failed to install the sources" in str(failed.value.output)


FLOOD_BACKEND = """import os

def get_requires_for_build_editable(config_settings=None):
    return []

def build_editable(directory, config_settings=None, metadata_directory=None):
    where = os.path.join(os.environ["HOME"], "flood")
    os.makedirs(where, exist_ok=True)
    for number in range(2000):
        open(os.path.join(where, str(number)), "w").close()
    raise SystemExit("built nothing")
"""
"""Sources whose build code writes 2000 files into its home before it fails."""


def test_sources_whose_build_writes_past_its_budget_fail_naming_it_and_leave_nothing(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "snapshot"
    tree.mkdir()
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        '[project]\nname = "flood"\nversion = "0.1"\n'
    )
    (tree / "backend.py").write_text(FLOOD_BACKEND)
    home = tmp_path / "home"
    home.mkdir()
    disk = wall_disk.Disk(bytes=64 << 20, files=300, check_s=0.1)
    builder = builds.Builder(env=builds.build_env(home), disk=disk)
    venv = tmp_path / "envs" / "run"

    with pytest.raises(subprocess.CalledProcessError) as failed:
        local_env.ensure(venv, [tree], user=builder)

    assert "SIMRUN_BUILD_FILES_MAX" in str(failed.value.output), failed.value.output
    assert not venv.exists()
