"""local_env: the mark of a made venv is never written through a link its build planted."""

from __future__ import annotations

import contextlib
from pathlib import Path

from runs.backends.local import env as local_env


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
