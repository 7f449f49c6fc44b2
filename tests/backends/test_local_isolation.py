"""A task of the local backend cannot reach the service's secrets nor another user's runs.

As root, as ``simrun serve`` runs in a deployment: each user's tasks run as a user id of
their own; the service's home is protected as ``serve`` protects it. A command task tries to
read each secret and is refused (real processes, real users, real file modes).
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.backends.local.backend import LocalBackend
from runs.cli.home import secret_key
from runs.cli.serve import protect_home
from tests.backends.local_fixtures import ended, phase, read_log, shell, stepping, submit
from tests.polling import wait_for

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="changing users needs root"),
]
UID_BASE = 300000
ALLOWED_ENV = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME"}
ALLOWED_ENV |= {"PYTHONUNBUFFERED", "PWD", "SHLVL", "_", "OLDPWD"}


@pytest.fixture
def home(settings) -> Iterator[Path]:
    """A service home as ``serve`` leaves it: database, secret key, broker, store, scratch.

    In /tmp, not pytest's tmp_path: the tasks' users must cross the folders above it."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    home = base / "home"
    home.mkdir()
    with sqlite3.connect(home / "simrun.sqlite3") as db:
        db.execute("CREATE TABLE knox_authtoken (digest TEXT)")
        db.execute("INSERT INTO knox_authtoken VALUES ('a-digest')")
    secret_key(home)
    (home / "broker" / "queue").mkdir(parents=True)
    (home / "broker" / "queue" / "message").write_text("a message")
    settings.SIMRUN_STORE = home / "store"
    settings.SIMRUN_SCRATCH = home / "scratch"
    settings.STATIC_ROOT = home / "static"
    settings.CELERY_BROKER_URL = f"sqlite:///{home / 'broker.sqlite3'}"
    protect_home(home)
    yield home
    shutil.rmtree(base)


@pytest.fixture
def backend(home) -> LocalBackend:
    return LocalBackend(
        store=home / "store",
        scratch=home / "scratch",
        cores=2,
        memory_gb=8,
        grace_s=1,
        task_uid_base=UID_BASE,
    )


def probe(paths: list[Path]) -> str:
    """A script that tries to read each path and says READ or DENIED of each."""
    tries = "; ".join(
        f'if cat "{p}" >/dev/null 2>&1; then echo "READ {p}"; else echo "DENIED {p}"; fi'
        for p in paths
    )
    return tries


def listing(path: Path, name: str) -> str:
    """A script that tries to list a folder and says LISTED or DENIED listing."""
    return f'ls "{path}" >/dev/null 2>&1 && echo "LISTED {name}" || echo "DENIED listing {name}"'


def test_a_task_reads_its_inputs_and_writes_its_task_dir_but_no_secret_or_other_run(
    backend, home, owner, stranger, monkeypatch
):
    from runs.models import Run

    monkeypatch.setenv("SECRET_KEY", "the-service-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://simrun:service-password@db/simrun")
    alice_run = Run.objects.create(owner=owner, spec={}, backend="local")
    mallory_run = Run.objects.create(owner=stranger, spec={}, backend="local")
    store = home / "store"
    alice_out = store / "runs" / alice_run.id / "tasks" / "t" / "out"
    secrets = [
        home / "simrun.sqlite3",
        home / "secret_key",
        home / "broker" / "queue" / "message",
        home / "broker.sqlite3",
        Path(f"/proc/{os.getpid()}/environ"),  # the service's environment
        Path(f"/proc/{os.getppid()}/environ"),
        alice_out / "result",  # another user's task directory
        store / "runs" / alice_run.id / "tasks" / "t" / "logs" / "t-0.log",
        store / "runs" / mallory_run.id / "tasks" / "probe" / "logs" / "probe-0.launch",
        store / "local" / "runs" / f"simrun-{alice_run.id}.json",  # alice's commands
    ]
    script = "; ".join(
        [
            "id -u",
            probe(secrets),
            listing(home, "home"),
            listing(store / "runs", "runs"),
            listing(store / "snapshots", "snapshots"),
            "cat inputs/table/answer",
            'echo written > "$SIMRUN_OUT/mine" && echo "WROTE out"',
            "env | cut -d= -f1 | sort | tr '\\n' ' '",
        ]
    )
    with stepping(backend):
        alice_task = {"t": {"command": shell('echo private > "$SIMRUN_OUT/result"')}}
        submit(backend, alice_run.id, alice_task, owner=owner.id)
        wait_for(lambda: ended(backend, alice_run.id), what="alice's run")
        assert phase(backend, alice_run.id) == "Succeeded"
        submit(
            backend,
            mallory_run.id,
            {
                "make": {"command": shell('echo 42 > "$SIMRUN_OUT/answer"')},
                "probe": {"command": shell(script), "inputs": {"table": "make"}},
            },
            owner=stranger.id,
        )
        wait_for(lambda: ended(backend, mallory_run.id), what="mallory's run")
    lines = read_log(backend, mallory_run.id, "probe", "probe").splitlines()
    assert phase(backend, mallory_run.id) == "Succeeded", lines
    assert int(lines[0]) == UID_BASE + stranger.id
    assert lines[1 : 1 + len(secrets)] == [f"DENIED {p}" for p in secrets]
    assert lines[1 + len(secrets) :][:6] == [
        "DENIED listing home",
        "DENIED listing runs",
        "DENIED listing snapshots",
        "42",
        "WROTE out",
        lines[-1],
    ]
    names = set(lines[-1].split())
    assert {n for n in names if not n.startswith("SIMRUN_")} <= ALLOWED_ENV
    assert (alice_out / "result").read_text() == "private\n"
    launch = store / "runs" / mallory_run.id / "tasks" / "probe" / "logs" / "probe-0.launch"
    assert "the-service-secret" not in launch.read_text()
    assert launch.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize(("network", "said"), [("loopback", "UNREACHABLE"), ("host", "REACHED")])
def test_a_task_reaches_no_port_of_the_machine_unless_its_network_is_the_hosts(
    home, stranger, network, said
):
    """With a network of its own (the default), a port the service listens on is not the
    task's to reach, nor to take: its 127.0.0.1 is its own."""
    from runs.models import Run

    backend = LocalBackend(
        store=home / "store",
        scratch=home / "scratch",
        cores=2,
        memory_gb=8,
        grace_s=1,
        task_uid_base=UID_BASE,
        task_network=network,
    )
    run = Run.objects.create(owner=stranger, spec={}, backend="local")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        reach = (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "    print('REACHED')\nexcept OSError:\n    print('UNREACHABLE')"
        )
        with stepping(backend):
            task = {"t": {"command": ["/usr/bin/python3", "-c", reach]}}
            submit(backend, run.id, task, owner=stranger.id)
            wait_for(lambda: ended(backend, run.id), what="the run")
    assert phase(backend, run.id) == "Succeeded"
    assert read_log(backend, run.id, "t", "t").split() == [said]
