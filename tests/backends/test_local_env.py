"""local_env: the mark of a made venv is never written through a link its build planted."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from runs.backends.local import env as local_env
from tests.floods import deep_tree, tmpfs


def test_a_link_planted_as_the_ready_mark_is_not_followed(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "elsewhere" / "created-by-root"
    target.parent.mkdir()

    def build(directory: Path, snapshots: list[Path], base: Path | None = None) -> None:
        # The sources' build code runs as the task user, who owns the venv: it plants a link.
        directory.mkdir()
        (directory / local_env.READY).symlink_to(target)

    monkeypatch.setattr(local_env, "_create", build)
    with contextlib.suppress(OSError):  # refused: not marked ready, made again next time
        local_env.ensure(tmp_path / "envs" / "run", [])
    assert not target.exists()
    assert not local_env._ready(tmp_path / "envs" / "run")


def test_a_venv_its_build_left_3000_folders_deep_is_made_again(tmp_path: Path, monkeypatch) -> None:
    """A build that failed (or was stopped) leaves the task user's tree unmarked; the next
    ``ensure`` in the root launcher removes it. shutil's recursive removal raised RecursionError
    (which ``ignore_errors`` does not catch) at this depth: the attempt was lost."""
    made = []

    def build(directory: Path, snapshots: list[Path], base: Path | None = None) -> None:
        directory.mkdir()
        made.append(directory)

    monkeypatch.setattr(local_env, "_create", build)
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
    builder = local_env.Builder(env=local_env.build_env(tmp_path))

    with pytest.raises(subprocess.CalledProcessError) as failed:
        local_env.isolated(tmp_path / "venv", [tree], builder)

    said = str(failed.value)
    assert said.startswith("pip install -e exited 1: ") and "project.version" in said
    assert "Traceback" not in said and sys.executable not in said
