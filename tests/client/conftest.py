"""Fixtures of ``runs.client``'s tests against a live server, whose cluster a thread plays
(``tests/fake_cluster.py``): a run moves to its end in a few steps, and a sweep of ``squares``
leaves the outputs and the log its pods would."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from runs import tasks
from runs.client import Client
from runs.common.tokens import create_token
from tests.fake_cluster import FakeCluster, SquaresCluster


@pytest.fixture(autouse=True)
def handed_off(queued, learning, settled) -> None:
    """The Celery tasks these tests hand runs to are recorded, not sent."""


@pytest.fixture
def cluster(backend, queued, monkeypatch) -> Iterator[FakeCluster]:
    monkeypatch.setattr(tasks.reconcile, "delay", lambda: None)
    player = SquaresCluster(backend, queued)
    player.start()
    yield player
    player.halt.set()
    player.join(timeout=10)
    assert player.error is None, player.error


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch) -> Path:
    """A user's config folder of their own, with no server or token in the environment."""
    folder = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    monkeypatch.delenv("SIMRUN_URL", raising=False)
    monkeypatch.delenv("SIMRUN_TOKEN", raising=False)
    return folder


@pytest.fixture
def token(owner) -> str:
    return create_token(owner)[1]


@pytest.fixture
def client(live_server, token, config_home) -> Iterator[Client]:
    """alice's client, printing into a console that is no terminal (lines, not bars)."""
    console = Console(file=io.StringIO(), force_terminal=False, width=120)
    with Client(live_server.url, token, console=console) as alice:
        yield alice
