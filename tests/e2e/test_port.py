"""The service's port is the service's: a task of a root ``simrun serve`` with task users cannot
listen where the service's clients connect, before, during or after a restart of serve."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.service import SIMRUN, Service, submit, wait_until_ended
from tests.polling import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 330000
SQUAT = """
import os, pathlib, socket, sys, time
port, out = int(sys.argv[1]), pathlib.Path(os.environ["SIMRUN_OUT"])
deadline = time.monotonic() + 120
(out / "trying").write_text("")
while time.monotonic() < deadline and not (out / "stop").exists():
    try:
        server = socket.create_server(("127.0.0.1", port))
    except OSError:
        time.sleep(0.01)
        continue
    (out / "bound").write_text("")
    server.settimeout(0.5)
    while time.monotonic() < deadline and not (out / "stop").exists():
        try:
            client, _ = server.accept()
        except OSError:
            continue
        client.settimeout(5)
        with open(out / "captured", "ab") as captured, client:
            try:
                captured.write(client.recv(65536))
            except OSError:
                pass
"""
"""A fake server: it binds the service's port as soon as it can and keeps what it is sent."""


@pytest.fixture
def service() -> Iterator[Service]:
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    service = Service(home=base / "home", extra_env={"SIMRUN_TASK_UID_BASE": str(UID_BASE)})
    service.start()
    yield service
    if service.process is not None:
        service.stop()
    shutil.rmtree(base, ignore_errors=True)


def make_user(service: Service, name: str) -> tuple[str, str]:
    """A user's password and API token."""
    said = subprocess.run(
        [SIMRUN, "user", name], env=service.env(), capture_output=True, text=True, check=True
    ).stdout
    return said.split("password: ")[1].split()[0], said.split("token: ")[1].split()[0]


def test_a_task_that_keeps_binding_the_port_neither_stops_a_restart_nor_hears_a_password(
    service,
):
    """Before: the task took the port the moment serve stopped; serve could not start again
    (Address already in use) and the fake server got what clients sent to the service."""
    _, token = make_user(service, "mallory")
    password, _ = make_user(service, "alice")
    with service.client(token) as mallory:
        run_id = submit(
            mallory,
            {"tasks": {"squat": {"command": ["/usr/bin/python3", "-c", SQUAT, str(service.port)]}}},
        )
        out = service.store / "runs" / run_id / "tasks" / "squat" / "out"
        wait_for(lambda: (out / "trying").exists(), 120, "the task to try the port")
        assert service.stop() == 0  # the processes of the run go on
        wait_for(lambda: (out / "bound").exists(), 30, "the task to bind a port")

        service.start()

        answer = httpx.post(
            f"{service.url}/api/token/",
            json={"username": "alice", "password": password},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        (out / "stop").write_text("")
        ended = wait_until_ended(mallory, run_id)
    assert ended["state"] == "succeeded", ended
    captured = (out / "captured").read_bytes() if (out / "captured").exists() else b""
    assert password.encode() not in captured and captured == b""
