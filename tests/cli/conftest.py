"""Fixtures of the CLI's tests: the ``simrun`` command as a process against a live server,
whose cluster a thread plays (``tests/fake_cluster.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runs import tasks
from runs.common.tokens import create_token
from tests.e2e.service import CONFIGURATION, SIMRUN
from tests.fake_cluster import FakeCluster


@pytest.fixture(autouse=True)
def handed_off(queued, learning, settled) -> None:
    """The Celery tasks these tests hand runs to are recorded, not sent."""


@pytest.fixture
def cluster(backend, queued, monkeypatch) -> Iterator[FakeCluster]:
    monkeypatch.setattr(tasks.reconcile, "delay", lambda: None)
    player = FakeCluster(backend, queued)
    player.start()
    yield player
    player.halt.set()
    player.join(timeout=10)
    assert player.error is None, player.error


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home of the user running the CLI: its config folder."""
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def simrun(live_server, owner, home):
    """Run ``simrun`` as alice would, against the live server."""
    _, token = create_token(owner)

    def run(
        *args: str,
        url: str | None = None,
        token_: str | None = token,
        stdin: str = "",
        background: bool = False,
        columns: str | None = "120",
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith((*CONFIGURATION, "COLUMNS"))}
        env.update(XDG_CONFIG_HOME=str(home / ".config"), HOME=str(home))
        if columns is not None:  # None: piped with no width asked, as into a file
            env["COLUMNS"] = columns
        env["SIMRUN_URL"] = url if url is not None else live_server.url
        if token_ is not None:
            env["SIMRUN_TOKEN"] = token_
        if background:  # with Ctrl-C as a terminal gives it, whatever this process ignores
            return subprocess.Popen(
                [SIMRUN, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        done = subprocess.run(
            [SIMRUN, *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    return run
