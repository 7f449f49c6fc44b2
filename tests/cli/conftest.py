"""The CLI against a live server: the ``simrun`` command as a process, a cluster played by a thread.

The live server hands each submitted run to the submission task; here a thread plays that
task and the cluster: it submits the run to the fake backend through the controller, then
moves its pods along (progress written to the store, node phases), ending the run as its
name asks (a name with ``fail`` fails), and reconciles after every step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection

from runs import tasks
from runs.api.authentication import create_token
from runs.backends.fake import FakeBackend
from runs.common import store
from runs.control import reconciling, submitting
from runs.models import Run, TaskKind
from tests.api.conftest import backend, queued, settled  # noqa: F401, F811
from tests.e2e.service import CONFIGURATION, SIMRUN

STEPS = 4
STEP_S = 0.8
"""Slower than the CLI's polls (1 s), so a follower sees the steps between."""


class FakeCluster(threading.Thread):
    """Submits the runs handed to submission and moves them to their end in ``STEPS`` steps."""

    def __init__(self, fake: FakeBackend, handed: list[str]) -> None:
        super().__init__(daemon=True)
        self.backend, self.handed = fake, handed
        self.steps: dict[str, int] = {}
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.wait(STEP_S):
                for run_id in [r for r in self.handed if r not in self.steps]:
                    submitting.submit(run_id, backend=self.backend)
                    self.steps[run_id] = 0
                for run_id in list(self.steps):
                    self.advance(run_id)
                reconciling.reconcile_pass(backend=self.backend)
        except BaseException as error:  # reported by the fixture, not lost in a thread
            self.error = error
        finally:
            connection.close()

    def advance(self, run_id: str) -> None:
        run = Run.objects.filter(pk=run_id).first()
        if run is None or run.ended or not run.workflow:
            return
        step = self.steps[run_id] = self.steps[run_id] + 1
        nodes = self.backend.dag_nodes(run.workflow)
        if step < STEPS:
            self.backend.set_phase(run.workflow, "Running")
            self.backend.set_nodes(run.workflow, dict.fromkeys(nodes, "Running"))
            for task in run.tasks.filter(kind=TaskKind.SPLIT):
                done = task.units_total * step // STEPS
                lines = "".join(f'{{"unit": {i}}}\n' for i in range(done))
                path = store.task_dir(run.id, task.task_id) / "progress.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(lines)
        elif "fail" in run.name:
            first = nodes[0]
            self.backend.fail_attempt(run.workflow, first, attempt=0, exit_code=3)
            self.backend.set_nodes(run.workflow, {first: "Failed"})
            self.backend.set_phase(run.workflow, "Failed", "child failed")
        else:
            self.backend.finish(run.workflow, "Succeeded")


@pytest.fixture
def cluster(backend, queued, monkeypatch) -> Iterator[FakeCluster]:  # noqa: F811
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
