"""``simrun serve`` as a user meets it: one command, a URL, a login, and a clean stop."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

import httpx
import pytest

from tests.e2e.service import SIMRUN, Service, service_processes
from tests.polling import wait_for

pytestmark = pytest.mark.slow


def test_a_user_made_with_simrun_user_gets_a_token_the_api_accepts(sqlite_service):
    token = sqlite_service.user("tokens")
    with sqlite_service.client(token) as api:
        assert api.get("runs/").status_code == 200
    with sqlite_service.client("not-a-token") as api:
        assert api.get("runs/").status_code == 401


def test_the_secret_key_is_kept_so_a_login_survives_a_restart(tmp_path):
    service = Service(home=tmp_path / "home")
    service.start()
    token = service.user("keeper")
    key = (service.home / "secret_key").read_text()
    service.stop()
    service.start()
    try:
        assert (service.home / "secret_key").read_text() == key
        with service.client(token) as api:
            assert api.get("runs/").status_code == 200
    finally:
        service.stop()


def test_a_port_another_server_holds_is_a_clear_error(tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        service = Service(home=tmp_path / "home", port=port)
        done = subprocess.run(
            [SIMRUN, "serve", "--port", str(port)],
            env=service.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


def test_each_web_worker_listens_itself_and_a_second_serve_on_the_port_is_refused(
    sqlite_service,
):
    """The kernel spreads connections over the workers' own sockets (SO_REUSEPORT), so a
    second serve could share the port unnoticed: the port check refuses it first."""
    listening = subprocess.run(
        ["ss", "-Hltnp", f"sport = :{sqlite_service.port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pids = set(re.findall(r"pid=(\d+)", listening))
    assert len(listening.splitlines()) == 2 and len(pids) == 2, listening
    done = subprocess.run(
        [SIMRUN, "serve", "--port", str(sqlite_service.port)],
        env=Service(home=sqlite_service.home.parent / "second").env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{sqlite_service.port}" in done.stderr


def since_start(service: Service) -> str:
    """What serve printed since its latest start."""
    return service.log.read_text(errors="replace").split(f"=== start {service.starts}\n")[-1]


def ready_line(service: Service) -> str | None:
    """Serve's log since its start once it holds the Celery worker's "ready." line."""
    text = since_start(service)
    return text if "ready." in text else None


def test_a_start_migrates_answers_once_ready_says_nothing_alarming_and_stops_on_sigterm(
    tmp_path,
):
    """One start of a new home, as a user meets it: the URL and how to log in printed once the
    dashboard answers and the worker takes tasks, no alarming line, and a SIGTERM that stops
    every child."""
    service = Service(home=tmp_path / "home")
    service.start()
    banner_seen = time.time()
    assert service.process is not None
    session = service.process.pid
    try:
        # At once, no retry: the banner promises a dashboard that answers.
        assert httpx.get(f"{service.url}/login/", timeout=10).status_code == 200
        # The store is there for a user's files, before any child writes it: the task
        # users may cross it, not list it.
        assert service.store.stat().st_mode & 0o007 == 0o001
        # The worker took tasks before the banner: its ready file (touched at Celery's
        # worker_ready, which Celery sends before it logs "ready.") is older than the banner.
        assert (tmp_path / "home" / "worker-ready").stat().st_mtime <= banner_seen
        text = wait_for(lambda: ready_line(service), 60, "the worker's ready line")
        assert f"simrun is running at {service.url}/" in text
        assert "simrun user NAME" in text  # how to log in
        for noise in ("SecurityWarning", "superuser", "Listening at", "[ERROR]", "Traceback"):
            assert noise not in text, text
        assert len(service_processes(session)) >= 5  # serve, web, worker, beat, the local step
        assert (service.home / "simrun.sqlite3").exists()
        # What the children make after the banner is the service's alone too: beat, started
        # once the dashboard answers, writes its schedule then.
        wait_for(lambda: beat_schedule(service.home), 60, "beat's schedule")
        shared = {"store", "scratch", "static", "envs"}
        opened = {
            entry.name: oct(entry.stat().st_mode & 0o777)
            for entry in service.home.iterdir()
            if entry.name not in shared and entry.stat().st_mode & 0o077
        }
        assert not opened, opened
    finally:
        assert service.stop() == 0
    wait_for(lambda: not service_processes(session), 30, "every child to stop")


def beat_schedule(home) -> list[str]:
    """The files of beat's schedule anywhere in the home (Celery's shelve: ``schedule.db``,
    or ``.dat``, ``.dir`` and ``.bak``)."""
    return [str(path) for path in home.rglob("*schedule*")]


def test_ctrl_c_stops_everything_with_one_line(tmp_path):
    """How long the stop takes is bench/first_start.py's figure, not this test's."""
    service = Service(home=tmp_path / "home")
    service.start()
    assert service.process is not None
    session = service.process.pid
    before = len(since_start(service).splitlines())

    code = service.interrupt()

    said = since_start(service).splitlines()[before:]
    assert code == 0
    # A control-loop step that was running may still log its end (level=INFO); nothing else.
    noise = [line for line in said if "level=INFO" not in line]
    assert noise == ["simrun: stopped; the processes of live runs go on"], said
    assert not service_processes(session)


@pytest.mark.skipif(os.geteuid() != 0, reason="task users need a root service")
def test_a_root_serve_whose_tasks_could_not_start_refuses_to_start_and_names_the_flag(tmp_path):
    """pytest's folders below /tmp/pytest-of-root let no other user pass: no task user could
    reach this home, so no task could ever start."""
    service = Service(home=tmp_path / "home")
    env = {k: v for k, v in service.env().items() if k != "SIMRUN_TASK_UID_BASE"}

    done = subprocess.run(
        [SIMRUN, "serve", "--port", str(service.port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert "no task could start" in done.stderr and "lets no other user pass" in done.stderr
    assert "--tasks-as-service" in done.stderr and "docs/team.md" in done.stderr
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{service.url}/login/", timeout=2)

    started = subprocess.Popen(
        [SIMRUN, "serve", "--port", str(service.port), "--tasks-as-service"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert started.stdout is not None
        for line in started.stdout:
            if "tasks run as this service's own user" in line:
                assert "docs/team.md" in line
                break
    finally:
        os.killpg(started.pid, signal.SIGINT)
        started.wait(timeout=30)
