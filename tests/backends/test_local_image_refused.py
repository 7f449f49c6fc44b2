"""On one machine whose commands run directly, a command task's ``image`` would be ignored
without a word: it is refused when the run is submitted, naming the task and the way out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.tasktypes import task_types
from runs.backends.local.backend import LocalBackend
from runs.models import Run
from runs.planning.spec import SpecError, validate_spec
from runs.planning.submission import create_run

pytestmark = pytest.mark.django_db

PLOT = {"command": ["python", "-c", "print(1)"], "image": "python:3.12-slim"}


@pytest.fixture
def local(settings, tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        settings.SIMRUN_STORE, tmp_path / "scratch", cores=2, memory_gb=4, enforce_memory=False
    )


def submit(owner: Any, local: LocalBackend, document: dict[str, Any]) -> Run:
    return create_run(spec=validate_spec(document, types=task_types()), owner=owner, backend=local)


def test_a_command_tasks_image_with_direct_commands_is_a_400_naming_it(owner, local):
    with pytest.raises(SpecError) as refused:
        submit(owner, local, {"tasks": {"plot": PLOT}})

    [message] = refused.value.errors["tasks"]
    assert message.startswith("tasks.plot.image: 'python:3.12-slim' would not be used")
    assert "commands: docker" in message
    assert not Run.objects.exists()


def test_with_docker_commands_or_without_an_image_the_run_is_accepted(owner, local, queued):
    assert submit(owner, local, {"tasks": {"plot": PLOT}, "commands": "docker"})
    assert submit(owner, local, {"tasks": {"plot": {"command": ["true"]}}})
