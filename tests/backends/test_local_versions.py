"""The local backend says which runs changed (``versions``): its step writes a digest of each
live run's status, so the control loop polls only the runs whose processes started or ended."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from runs.backends.local.backend import LocalBackend, workflow_name
from runs.backends.local.step import VERSIONS_STALE_S
from tests.backends.local_fixtures import submit, until_flag
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2, memory_gb=8, grace_s=2
    )


def test_a_run_keeps_its_version_until_its_process_ends(backend, tmp_path):
    flag = tmp_path / "go"
    submit(backend, "v1", {"wait": {"command": until_flag(flag)}})
    name = workflow_name("v1")
    assert backend.versions([name]) == {}  # no step yet: nothing is known

    backend.step()  # starts the process
    wait_for(lambda: backend.status(name).tasks.get("wait") == "Running", 10, "the start")
    backend.step()
    running = backend.versions([name, "simrun-unknown"])
    assert list(running) == [name]
    backend.step()
    assert backend.versions([name]) == running  # nothing changed

    flag.touch()
    wait_for(lambda: backend.status(name).phase == "Succeeded", 10, "the end")
    backend.step()
    assert backend.versions([name]) != running


def test_versions_no_step_rewrote_lately_are_no_signal(backend):
    submit(backend, "v2", {"say": {"command": ["true"]}})
    backend.step()
    name = workflow_name("v2")
    assert backend.versions([name])
    old = time.time() - VERSIONS_STALE_S - 1
    os.utime(backend.state / "versions.json", (old, old))
    assert backend.versions([name]) == {}
