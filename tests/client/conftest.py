"""``runs.client`` against a live server, whose cluster a thread plays (as for the CLI's tests):
a run moves to its end in a few steps, and a sweep of ``squares`` leaves the outputs and the
log its pods would."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from harness.examples import ising
from harness.results import write_mappings
from runs import tasks
from runs.api.authentication import create_token
from runs.client import Client
from runs.common import store
from runs.models import Run, TaskKind
from tests.api.conftest import backend, queued, settled  # noqa: F401
from tests.cli.conftest import STEPS, FakeCluster


class SquaresCluster(FakeCluster):
    """The fake cluster, writing a sweep's ``out/squares.csv`` and ``out/squares.json`` (as
    ``harness.examples.squares`` merges them) and a log, as its run ends; an ``ising`` task's
    results table, its units computed by the type itself (``harness.results`` writes it)."""

    def advance(self, run_id: str) -> None:
        super().advance(run_id)
        run = Run.objects.get(pk=run_id)
        if self.steps.get(run_id) != STEPS or "fail" in run.name:
            return
        for task in run.tasks.filter(kind=TaskKind.SPLIT):
            folder = store.task_dir(run.id, task.task_id)
            if task.type == "ising":
                settings = ising.IsingSettings(**task.settings)
                units = [ising.compute(settings, None, i) for i in range(task.units_total)]
                (folder / "out").mkdir(parents=True, exist_ok=True)
                write_mappings(folder / "out", units)
                continue
            (folder / "out").mkdir(parents=True, exist_ok=True)
            (folder / "logs").mkdir(parents=True, exist_ok=True)
            squares = [i * i for i in range(task.units_total)]
            (folder / "out" / "squares.json").write_text(json.dumps(squares))
            rows = "".join(f"{i},{s}\n" for i, s in enumerate(squares))
            (folder / "out" / "squares.csv").write_text("unit,square\n" + rows)
            log = "".join(f"unit {i} done\n" for i in range(task.units_total))
            (folder / "logs" / f"{task.task_id}-0.log").write_text(log)


@pytest.fixture
def cluster(backend, queued, monkeypatch) -> Iterator[FakeCluster]:  # noqa: F811
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
