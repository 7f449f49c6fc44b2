"""What ``simrun serve``'s banner says of the local backend's tasks: their user, their memory."""

from __future__ import annotations

import os

import pytest

from runs.backends.local import LocalBackend
from runs.cli import serve
from runs.cli.serve import isolation


def test_without_cgroups_or_task_users_the_banner_says_memory_and_files_are_shared(tmp_path):
    backend = LocalBackend(
        store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2, enforce_memory=False
    )

    said = isolation(backend)

    assert said.startswith("memory is not enforced")
    assert "tasks run as this service's own user" in said


@pytest.mark.skipif(os.geteuid() != 0, reason="task users need a root service")
def test_a_root_service_whose_store_no_task_user_reaches_says_why_no_task_starts(tmp_path):
    backend = LocalBackend(store=tmp_path / "store", scratch=tmp_path / "s", task_uid_base=300000)

    said = isolation(backend)

    # pytest's folders below /tmp/pytest-of-root let no other user pass
    assert "no task can start: " in said and "lets no other user pass" in said


def test_the_demo_runs_its_tasks_as_the_service_where_task_users_cannot_reach_it(
    tmp_path, monkeypatch, capsys
):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    monkeypatch.setenv("SIMRUN_HOME", str(locked / "var"))
    monkeypatch.delenv("SIMRUN_TASK_UID_BASE", raising=False)
    serve.demo_isolation()
    assert os.environ["SIMRUN_TASK_UID_BASE"] == "0"
    assert "the demo runs its tasks as this service's user" in capsys.readouterr().out
    monkeypatch.setenv("SIMRUN_TASK_UID_BASE", "300000")
    serve.demo_isolation()
    assert os.environ["SIMRUN_TASK_UID_BASE"] == "300000"  # isolation asked for is kept
