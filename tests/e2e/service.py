"""``simrun serve`` started as a user starts it, and a client of its REST API.

The service runs as subprocesses in a home of its own on a free loopback port, with the
embedded default (SQLite, the filesystem broker) or with PostgreSQL and Redis; nothing of the
test process's configuration reaches it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness import venvs
from tests.polling import wait_for

SIMRUN = str(Path(sys.executable).parent / "simrun")
START_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 240.0
ENDED = {"succeeded", "failed", "cancelled"}
CONFIGURATION = ("SIMRUN_", "CELERY_", "DJANGO_", "DATABASE_URL", "SECRET_KEY", "DEBUG")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Service:
    """A ``simrun serve`` in a home of its own; start and stop it as a user does."""

    home: Path
    port: int = field(default_factory=free_port)
    extra_env: dict[str, str] = field(default_factory=dict)
    simrun: str = SIMRUN
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        return Path(self.extra_env.get("SIMRUN_STORE") or self.home / "store")

    @property
    def log(self) -> Path:
        return self.home.parent / f"serve-{self.port}.log"

    def env(self) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
        # Tasks run as the service's user: the test's home is in a folder only root passes.
        defaults = {"SIMRUN_HOME": str(self.home), "SIMRUN_TASK_UID_BASE": "0"}
        return {**clean, **defaults, **self.extra_env}

    def start(self) -> None:
        """Start ``simrun serve`` and wait until it says where it runs."""
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(f"\n=== start {self.starts}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [self.simrun, "serve", "--port", str(self.port)],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        marker = f"simrun is running at {self.url}/"
        wait_for(
            lambda: (
                self._alive()
                and marker
                in self.log.read_text(errors="replace").split(f"=== start {self.starts}\n")[-1]
            ),
            START_TIMEOUT_S,
            f"simrun serve to start (see {self.log})",
        )

    def _alive(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"simrun serve ended with {self.process.returncode}: {self.log}")
        return True

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C does; returns its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self.process = None
        return code

    def interrupt(self) -> int:
        """Ctrl-C, as a terminal sends it: SIGINT to every process of the service at once;
        returns its exit code."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGINT)
        code = self.process.wait(timeout=60)
        self.process = None
        return code

    def crash(self) -> None:
        """SIGKILL serve and every process of the service (its process group), as a crash."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        wait_for(lambda: not service_processes(self.process.pid), 30, "the service to be gone")
        self.process = None

    def user(self, name: str) -> str:
        """Create a user with ``simrun user`` and return its API token."""
        done = subprocess.run(
            [self.simrun, "user", name], env=self.env(), capture_output=True, text=True, check=True
        )
        return done.stdout.split("token: ")[1].split()[0]

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/", headers={"Authorization": f"Token {token}"}, timeout=30
        )


SYSTEM_PYTHON = "/usr/bin/python3"
"""A Python every task user may run (this venv's lives below ``/root``, as pyenv's does)."""


def task_user_venv(folder: Path) -> Path:
    """A venv of ``SYSTEM_PYTHON`` in ``folder`` (one every task user may cross) that sees
    this venv's packages, simrun's commands in its ``bin``: the ``simrun`` of a serve whose
    task users run the harness, install snapshots and learn their types."""
    venv = folder / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", where],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines = [f"import site; site.addsitedir({path!r})" for path in site.getsitepackages()]
    Path(purelib, "simrun-tests.pth").write_text("\n".join(lines) + "\n")
    venvs.console_scripts(venv / "bin")
    return venv / "bin" / "simrun"


@contextlib.contextmanager
def task_user_serve(uid_base: int, **env: str) -> Iterator[Service]:
    """A root serve whose tasks run as task users from ``uid_base``: its home and its Python
    (``task_user_venv``) in a folder of /tmp every task user may cross, removed at its end."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    service = Service(
        home=base / "home",
        simrun=str(task_user_venv(base)),
        extra_env={"SIMRUN_TASK_UID_BASE": str(uid_base), **env},
    )
    service.start()
    try:
        yield service
    finally:
        if service.process is not None:
            service.stop()
        shutil.rmtree(base, ignore_errors=True)


def service_processes(session: int) -> list[int]:
    """The processes still in the session of a serve (its children share it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(stat[3]) == session and stat[0] != "Z":
                    found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    """Whether ``pid`` ended (a zombie too: reaped by init or not, it runs no more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def run_processes(store: Path, run_id: str) -> list[int]:
    """Every live process of a run: launchers (by their launch file) and what they started."""
    mark = f"/runs/{run_id}/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            if mark.encode() in text and str(store).encode() in text:
                found.append(int(entry.name))
    return found


def submit(client: httpx.Client, spec: dict[str, Any]) -> str:
    response = client.post("runs/", json=spec)
    # 202: the run's shipped types are learned in the worker before it is planned.
    assert response.status_code in {201, 202}, response.text
    return str(response.json()["id"])


def run_of(client: httpx.Client, run_id: str) -> dict[str, Any]:
    response = client.get(f"runs/{run_id}/")
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_until_ended(
    client: httpx.Client, run_id: str, timeout_s: float = RUN_TIMEOUT_S, interval_s: float = 0.05
):
    return wait_for(
        lambda: (run := run_of(client, run_id))["state"] in ENDED and run,
        timeout_s,
        f"run {run_id} to end",
        interval_s=interval_s,
    )


def wait_until_state(client: httpx.Client, run_id: str, state: str, timeout_s=RUN_TIMEOUT_S):
    return wait_for(
        lambda: (run := run_of(client, run_id))["state"] == state and run,
        timeout_s,
        f"run {run_id} to be {state}",
    )


def logged_in(service: Service, name: str) -> tuple[httpx.Client, str]:
    """A browser-like session of a new user, logged in through the login form; its token."""
    done = subprocess.run(
        [SIMRUN, "user", name], env=service.env(), capture_output=True, text=True, check=True
    )
    password = done.stdout.split("password: ")[1].split()[0]
    token = done.stdout.split("token: ")[1].split()[0]
    client = httpx.Client(base_url=service.url, timeout=30)
    form = client.get("/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    answer = client.post(
        "/login/",
        data={"username": name, "password": password, "csrfmiddlewaretoken": csrf[1]},
        headers={"Referer": f"{service.url}/login/"},
    )
    assert answer.status_code in (200, 302) and "sessionid" in client.cookies, answer.text
    return client, token
