"""A learning runs its user's code behind the wall a task has (runs/backends/local/wall.py):
a type module that daemonises at import neither outlives the learning nor reaches the
machine's loopback, and what it leaves in /tmp, /var/tmp and /dev/shm goes with it."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from runs.models import Run
from tests.api.test_shipped_types import gone, learned
from tests.e2e.service import task_user_venv
from tests.walkthrough import upload_package, write_plugin_package

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="task users and namespaces need root"),
]

DAEMON = """import os, socket, time
from pathlib import Path


def _daemonise():
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    seen = Path(SEEN)
    (seen / "daemon.pid.tmp").write_text(str(os.getpid()))
    os.rename(seen / "daemon.pid.tmp", seen / "daemon.pid")
    for folder in ("/dev/shm", "/tmp", "/var/tmp", "/run/lock"):
        try:
            Path(folder, MARK).write_text("left behind")
        except OSError:
            pass
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
        said = "reached"
    except OSError as error:
        said = f"refused: {error}"
    (seen / "net.tmp").write_text(said)
    os.rename(seen / "net.tmp", seen / "net")
    time.sleep(600)
    os._exit(0)


_daemonise()
_deadline = time.monotonic() + 60
while not Path(SEEN, "net").exists() and time.monotonic() < _deadline:
    time.sleep(0.05)
"""
"""A type module that double-forks and calls ``setsid`` at import (in the learning's
``python -m harness.describe``): the daemon writes its pid, leaves files in the machine's
shared folders, tries the port of the web (``PORT``) and says what it found, then sleeps."""


@pytest.fixture
def seen(as_task_users) -> Path:
    """A folder any user may write into that a learning's wall leaves as it is: in the
    machine's /run (the store is read-only to a learning but for its own folders, its /tmp
    is its own)."""
    folder = Path(tempfile.mkdtemp(prefix="simrun-seen-", dir="/run"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def team_folder() -> Path:
    """A folder every task user may cross, with a Python they may run (``task_user_venv``:
    this venv's is below /root)."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    task_user_venv(base)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def as_task_users(settings, monkeypatch, team_folder) -> None:
    """Learning as the owners' task users, from a store they may reach, run by a Python they
    may run."""
    settings.SIMRUN_TASK_UID_BASE = 200000
    settings.SIMRUN_STORE = str(team_folder / f"store-{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(sys, "executable", str(team_folder / "venv" / "bin" / "python"))


@pytest.fixture
def web_port() -> socket.socket:
    """A port listening on the machine's loopback, as the web's does."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        yield listener


def test_a_type_module_that_daemonises_at_import_ends_with_its_learning_and_reaches_nothing(
    owner, owner_client, tmp_path, as_task_users, seen, web_port
) -> None:
    mark = f"simrun-wall-{uuid.uuid4().hex}"
    package = write_plugin_package(tmp_path)
    module = package / "tally_sim" / "__init__.py"
    header = f"SEEN, MARK, PORT = {str(seen)!r}, {mark!r}, {web_port.getsockname()[1]}\n"
    module.write_text(header + DAEMON + module.read_text())
    spec = {"tasks": {"t": {"type": "tally", "settings": {"word": "x"}}}}
    spec["sources"] = [upload_package(owner, package)]

    run = learned(owner_client, spec)

    assert run.state == "submitting", run.message
    daemon = int((seen / "daemon.pid").read_text())
    # Ended with its learning: nothing of the user's code runs once it answered.
    assert gone(daemon)
    # Its loopback was its own: the machine's port was not reached, nor taken.
    assert (seen / "net").read_text().startswith("refused")
    with pytest.raises(BlockingIOError):
        web_port.accept()
    # What it left in the shared folders was its own, and went with it.
    for folder in ("/dev/shm", "/tmp", "/var/tmp", "/run/lock"):
        assert not Path(folder, mark).exists(), folder
    assert Run.objects.get(pk=run.pk).state == "submitting"
