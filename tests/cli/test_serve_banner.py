"""What ``simrun serve``'s banner says of the local backend's tasks: their user, their memory."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import pytest

from runs.backends.local.backend import LocalBackend
from runs.backends.local.banner import isolation
from runs.cli import serve


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


def serve_args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return parser.parse_args(list(flags))


@pytest.mark.skipif(os.geteuid() != 0, reason="task users need a root service")
def test_where_task_users_cannot_reach_the_home_serve_needs_a_choice_and_the_demo_makes_it(
    tmp_path, monkeypatch, capsys
):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    monkeypatch.delenv("SIMRUN_TASK_UID_BASE", raising=False)

    refusal = serve.task_users(serve_args(), locked / "var")

    assert refusal is not None and "--tasks-as-service" in refusal and "docs/team.md" in refusal
    assert "lets no other user pass" in refusal
    assert "SIMRUN_TASK_UID_BASE" not in os.environ
    assert serve.task_users(serve_args("--demo"), locked / "var") is None
    assert os.environ["SIMRUN_TASK_UID_BASE"] == "0"
    assert "the demo runs its tasks as this service's user" in capsys.readouterr().out


def test_tasks_as_service_runs_the_tasks_as_the_service(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMRUN_TASK_UID_BASE", "300000")
    assert serve.task_users(serve_args("--tasks-as-service"), tmp_path) is None
    assert os.environ["SIMRUN_TASK_UID_BASE"] == "0"


def test_isolation_asked_for_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMRUN_TASK_UID_BASE", "300000")
    assert serve.task_users(serve_args(), tmp_path / "locked") is None
    assert os.environ["SIMRUN_TASK_UID_BASE"] == "300000"


def test_the_banner_sends_to_the_page_on_who_a_task_runs_as(tmp_path):
    backend = LocalBackend(store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2)
    said = isolation(backend)
    assert "docs/team.md" in said and "docs/cli.md" not in said


@pytest.mark.skipif(os.geteuid() != 0, reason="task users need a root service")
def test_a_refusal_for_a_python_out_of_reach_names_the_pythons_fix_not_the_homes(
    tmp_path, monkeypatch
):
    locked = tmp_path / "root-home"
    locked.mkdir(mode=0o700)
    monkeypatch.setattr(sys, "executable", str(locked / ".pyenv" / "bin" / "python3"))
    monkeypatch.delenv("SIMRUN_TASK_UID_BASE", raising=False)
    with tempfile.TemporaryDirectory(dir="/tmp") as passable:
        os.chmod(passable, 0o755)

        refusal = serve.task_users(serve_args(), Path(passable) / "var")

    assert refusal is not None and f"{locked} lets no other user pass" in refusal
    assert "a Python every user may run" in refusal and "/usr/bin/python3 -m venv" in refusal
    assert "SIMRUN_HOME" not in refusal and "chmod" not in refusal


@pytest.mark.skipif(os.geteuid() != 0, reason="task users need a root service")
def test_a_refusal_for_a_home_out_of_reach_names_the_homes_fix_not_the_pythons(
    tmp_path, monkeypatch
):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    monkeypatch.delenv("SIMRUN_TASK_UID_BASE", raising=False)

    refusal = serve.task_users(serve_args(), locked / "var")

    assert refusal is not None and f"chmod o+x {locked}, move SIMRUN_HOME" in refusal
    assert "a Python every user may run" not in refusal
