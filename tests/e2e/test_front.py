"""The web front (simrun_site/front.py, simrun_site/asgi.py) against slow and greedy clients:
a real ``simrun serve``, and its web server alone as serve runs it, with small budgets."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runs.cli.serve import children
from tests.e2e.service import CONFIGURATION, Service, free_port, gone
from tests.polling import wait_for

pytestmark = pytest.mark.slow
HEADER_TIMEOUT_S = 3.0
BODY_TIMEOUT_S = 3.0


class Drip:
    """Slow clients: each connection sends the start of a request's head, then one byte of a
    header more every half second, from a thread, until stopped; what each received is kept."""

    def __init__(self, port: int, count: int) -> None:
        self.sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
        self.answers: dict[int, bytes] = {}
        self.stop = threading.Event()
        for s in self.sockets:
            s.sendall(b"GET /login/ HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            s.setblocking(False)
        self.thread = threading.Thread(target=self.drip)
        self.thread.start()

    def drip(self) -> None:
        while not self.stop.wait(0.5):
            for number, s in enumerate(self.sockets):
                if number in self.answers:
                    continue
                try:
                    got = s.recv(4096)
                except BlockingIOError:
                    got = None
                except OSError:
                    got = b""
                if got is not None:
                    self.answers[number] = got
                    continue
                try:
                    s.sendall(b"a")
                except OSError:
                    self.answers[number] = b""

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.sockets:
            s.close()


def test_slow_clients_hold_no_thread_and_are_cut_at_the_header_timeout(tmp_path):
    """8 such connections held every thread of gunicorn's 2 gthread workers: the login page
    went unanswered for everyone as long as they dripped."""
    env = {"SIMRUN_WEB_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)}
    service = Service(home=tmp_path / "home", extra_env=env)
    service.start()
    drip = Drip(service.port, 32)
    try:
        pages = [httpx.get(f"{service.url}/login/", timeout=2) for _ in range(3)]
        assert [page.status_code for page in pages] == [200] * 3
        wait_for(lambda: len(drip.answers) == 32, 30, "every slow client to be cut")
    finally:
        drip.close()
        service.stop()
    slowest = max(page.elapsed.total_seconds() for page in pages)
    print(f"\nfigures: the login page answered in {slowest:.3f} s at most while 32 dripped")
    assert set(drip.answers.values()) == {
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: 16\r\nconnection: close\r\n\r\nRequest Timeout\n"
    }


def start_front(home: Path, workers: int, **settings: str) -> tuple[subprocess.Popen, str]:
    """serve's web server alone (gunicorn's master and its workers), on SQLite; it and its
    URL once it answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
    env.update(
        SIMRUN_HOME=str(home),
        SECRET_KEY="front-tests",
        DJANGO_SETTINGS_MODULE="simrun_site.settings",
        **settings,
    )
    python = sys.executable
    subprocess.run([python, "-m", "django", "migrate", "-v", "0"], env=env, check=True)
    port = free_port()
    args = argparse.Namespace(host="127.0.0.1", port=port, web_workers=workers)
    web = children(args, stepped=False, home=home)[-1]
    server = subprocess.Popen(web.argv, env=env, cwd=home)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: answers(url), 60, "the web server to answer")
    return server, url


@pytest.fixture(scope="module")
def front(tmp_path_factory) -> Iterator[str]:
    """serve's web server alone (one worker), with small budgets; its URL."""
    server, url = start_front(
        tmp_path_factory.mktemp("front") / "home",
        workers=1,
        SIMRUN_WEB_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        SIMRUN_WEB_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        SIMRUN_WEB_HEADER_BYTES="8192",
        SIMRUN_WEB_MAX_CONNECTIONS="40",
        SIMRUN_WEB_BODY_BUFFER_MB="2",
    )
    yield url
    server.terminate()
    assert server.wait(timeout=30) == 0


def workers_of(master: int) -> list[int]:
    """The processes whose parent is ``master``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == master:
                    found.append(int(entry.name))
    return found


def test_the_workers_of_a_master_killed_outright_leave(tmp_path):
    """gunicorn's master killed outright (the OOM killer, a SIGKILL) stops no worker: they
    served on for ever, holding its port, with the code of before."""
    server, url = start_front(tmp_path / "home", workers=2)
    # The first worker may answer before the master forks the second (gunicorn waits up to
    # 0.1 s between two).
    wait_for(lambda: len(workers_of(server.pid)) == 2, 60, "the master's two workers")
    workers = workers_of(server.pid)

    server.kill()
    server.wait()

    wait_for(lambda: all(gone(w) for w in workers), 60, "the orphaned workers to leave")
    assert not answers(url)


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/login/", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def exchange(url: str, data: bytes, timeout_s: float = 30) -> bytes:
    """Send raw bytes on a new connection; what came back until the server closed it."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(front):
    started = time.monotonic()
    assert exchange(front, b"").startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started >= HEADER_TIMEOUT_S - 0.5


def test_a_head_past_its_bound_is_refused_with_431(front):
    head = b"GET /login/ HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
    assert exchange(front, head).startswith(b"HTTP/1.1 431 ")


def test_a_body_that_does_not_come_in_time_is_answered_408(front):
    head = b"POST /api/runs/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    answer = exchange(front, head + b"Content-Length: 1000\r\n\r\n{")
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_a_body_declared_past_its_cap_is_answered_413_without_sending_it(front):
    head = b"POST /api/runs/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    answer = exchange(front, head + b"Content-Length: 67108864\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ") and b"larger than 1048576 bytes" in answer


def test_a_chunked_body_past_its_cap_is_answered_413(front):
    body = b"x" * (2 * 1024 * 1024)
    answer = httpx.post(f"{front}/api/runs/", content=iter([body]), timeout=30)
    assert answer.status_code == 413


def test_bodies_past_the_workers_buffer_wait_for_a_503(front):
    head = b"POST /api/runs/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    port = int(front.rsplit(":", 1)[1])
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        for body in held:
            # Its body is awaited (100 Continue) once its 1e6 bytes of the 2 MiB are held.
            body.sendall(head + b"Expect: 100-continue\r\nContent-Length: 1000000\r\n\r\n")
            assert body.recv(100).startswith(b"HTTP/1.1 100 ")
        answer = exchange(front, head + b"Content-Length: 200000\r\n\r\n")
    finally:
        for body in held:
            body.close()
    assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 5" in answer


def test_past_the_connections_of_a_worker_a_request_is_answered_503(front):
    port = int(front.rsplit(":", 1)[1])
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
    try:
        answer = httpx.get(f"{front}/login/", timeout=10)
    finally:
        for s in held:
            s.close()
    assert answer.status_code == 503
    wait_for(lambda: answers(front), 30, "the worker to answer again")


def test_x_forwarded_for_from_loopback_does_not_change_the_throttled_address(front):
    """uvicorn would take the address from X-Forwarded-For of a loopback client: each guess
    then came from an address of its choosing, and the throttle never locked it out."""
    with httpx.Client(base_url=f"{front}/api/", timeout=30) as client:
        answers = [
            client.post(
                "token/",
                json={"username": f"nobody{n}", "password": "wrong"},
                headers={"X-Forwarded-For": f"10.0.0.{n}"},
            ).status_code
            for n in range(12)
        ]
    assert answers[-1] == 429, answers


def test_static_files_are_served(front):
    answer = httpx.get(f"{front}/static/runs/simrun.js", timeout=10)
    assert answer.status_code == 200 and "htmx" in answer.text


def test_a_static_file_larger_than_a_batch_is_served_whole(front):
    """Redoc's script (1.1 MB, four batches of the front): it was cut after two, the page
    of the API docs blank, as every download past 512 KiB was."""
    path = "/static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
    answer = httpx.get(f"{front}{path}", timeout=30, headers={"Accept-Encoding": "identity"})
    assert answer.status_code == 200
    assert len(answer.content) == int(answer.headers["content-length"]) > 4 * 256 * 1024
