"""Personas and runs as the service's tests make them: alice owns, mallory is a stranger, the
operator is staff; runs are submitted, put into a backend's hands and ended as the service does.

Test modules import these; conftest files hold only fixtures (``tests/service_fixtures.py``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from harness.tasktypes import task_types
from runs.backends.base import Placement
from runs.models import Run, RunState, Task, TaskState
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run

SWEEP_YAML = """
name: demo
tasks:
  sweep: {type: squares, settings: {n: 20}, workers: 2}
  summary: {type: csv-stats, inputs: {table: sweep}}
"""


def alice() -> User:
    """The owner of the runs a test makes."""
    return User.objects.create_user("alice", password="alice-password")


def mallory() -> User:
    """A stranger to alice's runs."""
    return User.objects.create_user("mallory", password="mallory-password")


def operator() -> User:
    """Staff, who sees every run."""
    return User.objects.create_user("operator", password="operator-password", is_staff=True)


def client_for(user: User | None) -> APIClient:
    """An API client logged in as ``user`` (anonymous for None)."""
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


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
