"""Fixtures and helpers of the controller's tests: the fake backend the controller uses, runs.

Import the fixtures a test module needs by name (``from tests.service.controller_support
import fake, launch  # noqa: F401``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.tasktypes import task_types
from runs import tasks
from runs.backends import get_backend
from runs.backends.base import PodLog
from runs.backends.fake import FakeBackend
from runs.common import store
from runs.control import reconciling, submitting
from runs.control.reports import task_of
from runs.models import Run, Task
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run

SWEEP = {"tasks": {"sweep": {"type": "squares", "settings": {"n": 6}, "workers": 3}}}
"""One split task of 3 workers: nodes sweep-w0, sweep-extra(0:1), sweep-extra(1:2), sweep-merge."""
PIPELINE = {
    "tasks": {
        "sweep": {"type": "squares", "settings": {"n": 6}, "workers": 2},
        "summary": {"type": "csv-stats", "inputs": {"table": "sweep"}},
        "plot": {"command": ["echo", "plot"], "inputs": {"stats": "summary"}},
    }
}
"""A split task feeding a plugin task feeding a command task."""


@pytest.fixture
def home(settings, tmp_path: Path) -> Path:
    """A SIMRUN_HOME of the test's own: its locks and flags start free."""
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    return settings.SIMRUN_HOME


@pytest.fixture
def fake(home: Path) -> Iterator[FakeBackend]:
    """The backend the controller and the submission get from ``get_backend()``."""
    get_backend.cache_clear()
    backend = get_backend()
    assert isinstance(backend, FakeBackend)
    yield backend
    get_backend.cache_clear()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[Any, ...]]]:
    """The Celery tasks sent, by name, kept here instead of going to a broker."""
    kept: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for task in (tasks.reconcile, tasks.settle, tasks.submit_run, tasks.recover):

        def delay(*args: Any, _name: str = task.name) -> None:
            kept[_name].append(args)

        def apply_async(args: tuple[Any, ...] = (), _name: str = task.name, **_: Any) -> None:
            kept[_name].append(tuple(args))

        monkeypatch.setattr(task, "delay", delay)
        monkeypatch.setattr(task, "apply_async", apply_async)
    return kept


@pytest.fixture
def launch(owner: Any, fake: FakeBackend, sent: Any) -> Callable[..., Run]:
    """Create a run as the API does and submit it to the fake backend."""

    def launch(spec: dict[str, Any] = SWEEP, *, submit: bool = True) -> Run:
        run = create_run(
            spec=parse_spec(yaml.safe_dump(spec, sort_keys=False), types=task_types()), owner=owner
        )
        if submit:
            assert submitting.submit(run.id, backend=fake)
        return Run.objects.get(pk=run.pk)

    return launch


def poll(backend: FakeBackend) -> int:
    """One reconcile pass over the live runs."""
    return reconciling.reconcile_pass(backend=backend)


def fresh(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


def states(run: Run) -> dict[str, str]:
    return {t.task_id: t.state for t in Task.objects.filter(run=run).order_by("position")}


def task_dir(run: Run, task_id: str) -> Path:
    return store.task_dir(run.id, task_id)


def write_report(run: Run, worker: str, attempt: int = 0, **fields: Any) -> Path:
    """A worker report as the harness writes it, ``workers/<worker>-<attempt>.json``."""
    task_id = task_of(worker, {t.task_id for t in run.tasks.all()})
    assert task_id is not None
    report = {
        "worker": worker,
        "node": "node-a",
        "processes": 2,
        "units_done": [0, 1],
        "seconds": 3.0,
        "peak_memory_bytes": 300 * 2**20,
        "memory_limit_bytes": 2**30,
        "per_worker_gb": 0.1,
        "oom_kills": 0,
        "unit_seconds": 1.5,
        "cpu_seconds": 2.5,
        "failed": False,
        **fields,
    }
    path = task_dir(run, task_id) / "workers" / f"{worker}-{attempt}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report))
    return path


def write_marker(run: Run, task_id: str) -> None:
    """The marker a merge writes, ``out/.simrun-merged``."""
    out = task_dir(run, task_id) / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / ".simrun-merged").touch()


def pod_log(node: str, text: str = "hello\n", *, attempt: int = 0, done: bool = True) -> PodLog:
    return PodLog(node=node, pod=f"pod-{node}-{attempt}", text=text, done=done, attempt=attempt)
