"""Fixtures of the API and dashboard tests: a fresh fake backend, runs made as users make them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from harness.tasktypes import task_types
from runs import tasks
from runs.backends import get_backend
from runs.backends.base import Placement
from runs.backends.fake import FakeBackend
from runs.models import Run, RunState, Task, TaskState
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run

SWEEP_YAML = """
name: demo
tasks:
  sweep: {type: squares, settings: {n: 20}, workers: 2}
  summary: {type: csv-stats, inputs: {table: sweep}}
"""


@pytest.fixture(autouse=True)
def queued(monkeypatch) -> list[str]:
    """The runs handed to the submission task (the Celery task itself is the controller's)."""
    handed: list[str] = []
    monkeypatch.setattr(tasks.submit_run, "delay", handed.append)
    return handed


@pytest.fixture(autouse=True)
def learning(monkeypatch) -> list[str]:
    """The runs handed to the learner (the Celery task itself is ``controller.learn``)."""
    handed: list[str] = []
    monkeypatch.setattr(tasks.learn_run, "delay", handed.append)
    return handed


@pytest.fixture(autouse=True)
def settled(monkeypatch) -> list[str | None]:
    """The runs handed to the settle task."""
    handed: list[str | None] = []
    monkeypatch.setattr(tasks.settle, "delay", handed.append)
    return handed


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    """The service's backend, a fake of its own for this test."""
    get_backend.cache_clear()
    fake = get_backend()
    assert isinstance(fake, FakeBackend)
    yield fake
    get_backend.cache_clear()


def submitted(owner: Any, text: str = SWEEP_YAML) -> Run:
    """A run as a submission creates it: rows, plans and store files."""
    return create_run(spec=parse_spec(text, types=task_types()), owner=owner)


def running(run: Run, **task_states: str) -> Run:
    """Put a run into the backend's hands: running, with a workflow and some task states."""
    Run.objects.filter(pk=run.pk).update(
        state=RunState.RUNNING, workflow=f"simrun-{run.id}", submitted_at=timezone.now()
    )
    for task_id, state in task_states.items():
        Task.objects.filter(run=run, task_id=task_id).update(state=state)
    return Run.objects.get(pk=run.pk)


def ended(run: Run, state: str = RunState.SUCCEEDED, **changes: Any) -> Run:
    """End a run as the controller does: the terminal record, its tasks final."""
    Run.objects.filter(pk=run.pk).update(state=state, ended_at=timezone.now(), **changes)
    final = TaskState.DONE if state == RunState.SUCCEEDED else TaskState.SKIPPED
    Task.objects.filter(run=run).update(state=final)
    return Run.objects.get(pk=run.pk)


def pod(run: Run, task: str = "sweep", node: str | None = "node-a", **extra: Any) -> Placement:
    """A running pod of a run's task as the backend places it (2 cores, 1.5 GiB unless told)."""
    fields = {
        "workflow": f"simrun-{run.id}",
        "dag_task": f"{task}-w0",
        "pod": f"simrun-{run.id}-{task}-1",
        "node": node,
        "phase": "Running",
        "cores": 2,
        "memory_gb": 1.5,
        "worker": f"{task}-w0",
        "attempt": 0,
    }
    return Placement(**{**fields, **extra})
