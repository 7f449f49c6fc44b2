"""The learner learns the users' runs in turn: three of mallory's runs whose sources hang at
import, submitted before alice's, do not delay alice's (runs/control/learning.py)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from django.db import connection

from runs.control.learning import learn_in_turn
from runs.models import Run
from tests.polling import wait_for
from tests.walkthrough import upload_package, write_plugin_package

pytestmark = pytest.mark.django_db(transaction=True)

GATED = """import time
from pathlib import Path

Path(SEEN, "waiting-" + str(__import__("os").getpid())).touch()
while not Path(SEEN, "open").exists():
    time.sleep(0.05)
"""
"""Sources whose import waits for ``SEEN/open``: slow sources, as slow as the test says."""


@pytest.fixture
def seen() -> Path:
    """A folder any user may write into that a learning's wall leaves as it is: in the
    machine's /run (the store is read-only to a learning but for its own folders, its /tmp
    is its own)."""
    folder = Path(tempfile.mkdtemp(prefix="simrun-seen-", dir="/run"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def submitted(client, digest: str, word: str) -> str:
    spec = {"tasks": {"t": {"type": "tally", "settings": {"word": word}}}, "sources": [digest]}
    response = client.post("/api/runs/", spec, format="json")
    assert response.status_code == 202, response.json()
    return str(response.json()["id"])


def learner() -> threading.Thread:
    """One of the learner's processes taking a turn (``SIMRUN_LEARNERS`` of them)."""

    def turn() -> None:
        try:
            learn_in_turn()
        finally:
            connection.close()

    thread = threading.Thread(target=turn, daemon=True)
    thread.start()
    return thread


def test_a_users_slow_sources_delay_only_that_users_runs(
    owner, owner_client, stranger, stranger_client, tmp_path, seen, learning
) -> None:
    slow = write_plugin_package(tmp_path / "mallory")
    module = slow / "tally_sim" / "__init__.py"
    module.write_text(f"SEEN = {str(seen)!r}\n" + GATED + module.read_text())
    mallorys = [submitted(stranger_client, upload_package(stranger, slow), f"m{i}") for i in "123"]
    alices = submitted(owner_client, upload_package(owner, write_plugin_package(tmp_path)), "a")

    first = learner()
    wait_for(lambda: any(seen.glob("waiting-*")), 120, "mallory's first learning to hang")
    second = learner()
    try:
        wait_for(
            lambda: Run.objects.get(pk=alices).state == "submitting",
            180,
            "alice's run to be learned while mallory's hang",
        )
        assert Run.objects.get(pk=mallorys[0]).state == "learning"
    finally:
        (seen / "open").touch()
    for thread in (first, second):
        thread.join(timeout=300)
        assert not thread.is_alive()
    assert [Run.objects.get(pk=run).state for run in mallorys] == ["submitting"] * 3
