"""A service that could start none of a run's tasks refuses it at once, with a 503 that names
the fix, instead of accepting it to fail every task (a root service whose tasks' users cannot
reach the store, or this Python below /root as pyenv installs it)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.backends.local import user as local_user
from runs.backends.local.backend import LocalBackend
from runs.models import Run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="task users need a root service"),
]
SWEEP = "tasks:\n  sweep: {type: squares, settings: {n: 4}}\n"
COMMAND = "tasks:\n  say: {command: [echo, hi]}\n"
COMMAND_SWEEP = "tasks:\n  say: {command: [echo, '{x}'], sweep: {x: [1, 2]}}\n"


def isolating(monkeypatch, root: Path) -> LocalBackend:
    """The service's backend: a root service whose tasks run as users of their own."""
    backend = LocalBackend(
        store=root / "store", scratch=root / "scratch", cores=2, task_uid_base=300000
    )
    monkeypatch.setattr("runs.planning.submission.get_backend", lambda: backend)
    return backend


@pytest.fixture
def passable() -> Iterator[Path]:
    """A folder every task user may cross (pytest's own below /tmp/pytest-of-root is not)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


def test_a_run_no_task_user_could_start_is_a_503_naming_the_fix_and_no_run(
    owner_client, tmp_path, monkeypatch
):
    isolating(monkeypatch, tmp_path)  # below a folder only root may cross

    response = owner_client.post("/api/runs/", data=COMMAND, content_type="application/yaml")

    assert response.status_code == 503
    detail = response.json()["detail"]
    assert "this service can start no task of yours" in detail
    assert "lets no other user pass" in detail and "chmod o+x" in detail
    assert "simrun serve --tasks-as-service" in detail
    assert not Run.objects.exists()


@pytest.mark.skipif(
    local_user.unreachable(Path(sys.executable).resolve()) is None,
    reason="this Python is reachable by task users (not below /root)",
)
def test_with_this_python_out_of_reach_a_sweep_is_refused_and_a_command_accepted(
    owner_client, passable, monkeypatch
):
    isolating(monkeypatch, passable)

    sweep = owner_client.post("/api/runs/", data=SWEEP, content_type="application/yaml")
    command = owner_client.post("/api/runs/", data=COMMAND, content_type="application/yaml")
    swept = owner_client.post("/api/runs/", data=COMMAND_SWEEP, content_type="application/yaml")

    assert sweep.status_code == 503
    assert "no split or plugin task" in sweep.json()["detail"]
    assert swept.status_code == 503  # its units run in the harness, this Python
    assert command.status_code == 201
    assert Run.objects.count() == 1


def test_a_rerun_the_service_could_not_start_is_a_503(owner_client, owner, tmp_path, monkeypatch):
    made = owner_client.post("/api/runs/", data=COMMAND, content_type="application/yaml")
    assert made.status_code == 201
    isolating(monkeypatch, tmp_path)

    response = owner_client.post(f"/api/runs/{made.json()['id']}/rerun/")

    assert response.status_code == 503
    assert "--tasks-as-service" in response.json()["detail"]
    assert Run.objects.count() == 1


def test_the_new_run_form_keeps_the_text_and_says_why_with_a_503(
    client, owner, tmp_path, monkeypatch
):
    isolating(monkeypatch, tmp_path)
    client.force_login(owner)

    page = client.post("/runs/new/", {"spec": COMMAND})

    assert page.status_code == 503
    text = page.content.decode()
    assert "Not submitted: this service can start no task of yours" in text
    assert "echo, hi" in text  # the spec is still in the editor
    assert not Run.objects.exists()
