"""Issue 35's rows about users, code and shares, against a real ``simrun serve`` run as root
with task users, from a Python every task user may run (``task_user_venv``): sources work
under task users, and one user's code, uploads and runs spend no one else's share."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runs.client.packing import pack
from tests.e2e.service import Service, task_user_venv, wait_until_ended
from tests.walkthrough import write_plugin_package

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 330000


@pytest.fixture(scope="module")
def team() -> Iterator[Service]:
    """A serve as root with task users, its home and its Python within their reach."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    service = Service(
        home=base / "home",
        simrun=str(task_user_venv(base)),
        extra_env={"SIMRUN_TASK_UID_BASE": str(UID_BASE)},
    )
    service.start()
    yield service
    if service.process is not None:
        service.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def alice(team: Service) -> Iterator[httpx.Client]:
    with team.client(team.user("alice")) as client:
        yield client


def upload(client: httpx.Client, tree: Path) -> httpx.Response:
    return client.post(
        "snapshots/",
        params={"name": tree.name},
        content=pack(tree),
        headers={"Content-Type": "application/gzip"},
    )


def submitted(client: httpx.Client, spec: dict) -> str:
    """A run's id, whether its submission was answered at once (201) or learns first (202)."""
    answer = client.post("runs/", json=spec)
    assert answer.status_code in {201, 202}, answer.text
    return str(answer.json()["id"])


def test_a_type_shipped_in_sources_runs_as_its_owners_task_user(team, alice, tmp_path):
    uploaded = upload(alice, write_plugin_package(tmp_path))
    assert uploaded.status_code == 201, uploaded.text
    spec = {
        "tasks": {"tally": {"type": "tally", "settings": {"word": "two"}}},
        "sources": [uploaded.json()["id"]],
    }

    run = wait_until_ended(alice, submitted(alice, spec))

    assert run["state"] == "succeeded", run
    out = team.store / "runs" / run["id"] / "tasks" / "tally" / "out" / "tally.txt"
    assert out.read_text() == "two\n"
    assert out.stat().st_uid == UID_BASE + 1  # alice is the first user
