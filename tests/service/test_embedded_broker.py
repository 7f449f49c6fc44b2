"""The embedded default's broker: one SQLite file under SIMRUN_HOME, made by whoever uses it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.e2e.service import CONFIGURATION, SIMRUN, free_port
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def embedded(home: Path) -> dict[str, str]:
    """The environment of a process with nothing configured but its home."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
    # Tasks as the service's user: the home is in a folder only root passes, where a root
    # service refuses the runs its tasks' users could not start (a 503).
    return {
        **clean,
        "SIMRUN_HOME": str(home),
        "SECRET_KEY": "test",
        "PYTHONPATH": str(ROOT),
        "SIMRUN_TASK_UID_BASE": "0",
    }


def queued(home: Path) -> int:
    """The messages waiting in the broker file."""
    with sqlite3.connect(home / "broker.sqlite3") as db:
        return int(db.execute("SELECT count(*) FROM kombu_message WHERE visible").fetchone()[0])


def test_a_message_one_process_sends_another_receives_through_the_file(tmp_path: Path):
    home = tmp_path / "home"
    send = textwrap.dedent(
        """
        import django; django.setup()
        from simrun_site.celery import app
        with app.connection_for_write() as connection:
            connection.SimpleQueue("probe").put({"run": "r1"})
        """
    )
    receive = textwrap.dedent(
        """
        import django; django.setup()
        from simrun_site.celery import app
        with app.connection_for_read() as connection:
            queue = connection.SimpleQueue("probe")
            message = queue.get(timeout=10)
            message.ack()
            print(message.payload["run"])
        """
    )
    env = {**embedded(home), "DJANGO_SETTINGS_MODULE": "simrun_site.settings"}
    subprocess.run([sys.executable, "-c", send], cwd=ROOT, env=env, check=True)
    assert (home / "broker.sqlite3").exists(), "the first process made the home and the file"
    done = subprocess.run(
        [sys.executable, "-c", receive], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "r1"


def test_runserver_with_the_embedded_default_accepts_a_run(tmp_path: Path):
    """No ``simrun serve`` made the home: the broker's file is made by the first use."""
    home = tmp_path / "home"
    env = embedded(home)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    login = subprocess.run(
        [SIMRUN, "user", "dev"], env=env, capture_output=True, text=True, check=True
    )
    token = login.stdout.split("token: ")[1].split()[0]
    port = free_port()
    log = (tmp_path / "runserver.log").open("w")
    server = subprocess.Popen(
        [*manage, "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}/api/",
            headers={"Authorization": f"Token {token}"},
            timeout=30,
        )
        wait_for(lambda: _answers(api), 60, "runserver to answer")
        spec = {"name": "dev", "tasks": {"t": {"command": ["true"]}}}
        response = api.post("runs/", json=spec)
        assert response.status_code == 201, response.text
        assert queued(home) == 1, "the submission waits in the broker for a worker"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _answers(api: httpx.Client) -> bool:
    try:
        return api.get("runs/").status_code == 200
    except httpx.TransportError:
        return False


RACE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import django; django.setup()
    from simrun_site.celery import app
    go = Path(sys.argv[1])
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.session  # the engine and the tables, before the start
        Path(sys.argv[2]).touch()
        while not go.exists():
            time.sleep(0.001)
        connection.SimpleQueue("race").put({"from": sys.argv[2]})
    """
)


def test_processes_that_make_the_same_queue_at_once_all_send(tmp_path: Path):
    """The web's first message and the worker's start make the queue at the same moment."""
    home = tmp_path / "home"
    env = {**embedded(home), "DJANGO_SETTINGS_MODULE": "simrun_site.settings"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup()\nfrom simrun_site.celery import app\n"
            "app.connection_for_write().default_channel.session",
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(8)]
    senders = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(go), str(mark)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mark in ready
    ]
    wait_for(lambda: all(mark.exists() for mark in ready), 120, "the senders to be ready")
    go.touch()
    errors = [sender.communicate(timeout=120)[1] for sender in senders]
    assert [sender.returncode for sender in senders] == [0] * len(senders), errors
    with sqlite3.connect(home / "broker.sqlite3") as db:
        queues = db.execute("SELECT id FROM kombu_queue WHERE name = 'race'").fetchall()
        sent = db.execute(
            "SELECT count(*) FROM kombu_message WHERE queue_id = ?", queues[0]
        ).fetchone()[0]
    assert len(queues) == 1 and sent == len(senders)
