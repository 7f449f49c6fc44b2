"""The launcher started ahead: each attempt's launcher forked from it, as one started alone."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from runs.backends.local.backend import LocalBackend
from runs.backends.local.launch import SERVER
from tests.backends.local_fixtures import ended, phase, stepping, submit, until_flag
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2, memory_gb=8, grace_s=2
    )


def stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command's name (state first)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def descriptors(pid: int) -> dict[int, str]:
    """What each descriptor of a process points at; one it closed while they were read (a
    folder it counts, a file it reads now and then) is left out."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
    return found


def held(pid: int) -> set[str]:
    """What the descriptors of a process point at."""
    return set(descriptors(pid).values())


def launcher_of(backend: LocalBackend, run_id: str) -> int:
    """The launcher of a run's task ``t``, once it named itself and its process."""
    pid_file = backend.store / "runs" / run_id / "tasks" / "t" / "logs" / "t-0.pid"

    def named() -> int | None:
        if not pid_file.exists():
            return None
        names = json.loads(pid_file.read_text())
        return names["launcher"] if "pid" in names else None

    return wait_for(named, what=pid_file.name)


def test_launchers_are_forked_by_one_server_each_alone_in_its_session_with_only_its_fds(backend):
    flag = backend.store.parent / "go"
    with stepping(backend):
        for run_id in ("s1", "s2"):
            submit(backend, run_id, {"t": {"command": until_flag(flag)}})
        first, second = launcher_of(backend, "s1"), launcher_of(backend, "s2")
        parent = int(stat(first)[1])
        assert [t for t in held(parent) if t.startswith("socket:")]
        # Not a new Python started by this process each time: one server, started ahead.
        assert parent == int(stat(second)[1]) != os.getpid()
        assert SERVER.process is not None and parent == SERVER.process.pid
        for launcher in (first, second):
            assert os.getsid(launcher) == launcher == os.getpgid(launcher)
            # stdin, stdout and stderr (the pipe of its log's capture), the log, the logs
            # folder (the launch file read and closed), its wake-up socket: nothing the
            # server holds.
            fds = descriptors(launcher)
            assert not (set(fds.values()) - {os.devnull}) & held(parent)
            assert fds[0] == os.devnull
            assert fds[1] == fds[2]
            assert any(target.endswith("/logs/t-0.log") for target in fds.values())
            assert any(target.endswith("/logs") for target in fds.values())
        flag.touch()
        wait_for(lambda: ended(backend, "s1") and ended(backend, "s2"), what="the ends")
    assert phase(backend, "s1") == phase(backend, "s2") == "Succeeded"


def test_a_server_that_died_is_started_again_at_the_next_launch(backend):
    with stepping(backend):
        submit(backend, "d1", {"t": {"command": ["true"]}})
        wait_for(lambda: ended(backend, "d1"), what="the first run")
        assert SERVER.process is not None
        dead = SERVER.process
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        submit(backend, "d2", {"t": {"command": ["true"]}})
        wait_for(lambda: ended(backend, "d2"), what="the second run")
    assert phase(backend, "d2") == "Succeeded"
    assert SERVER.process is not None and SERVER.process.pid != dead.pid


def test_a_launch_after_the_python_changed_runs_under_the_new_one(backend, monkeypatch):
    """The server runs the Python of its start: when the service's Python is another (a serve
    whose task users need a Python they can reach), the next launch starts a server of it."""
    with stepping(backend):
        submit(backend, "p1", {"t": {"command": ["true"]}})
        wait_for(lambda: ended(backend, "p1"), what="the first run")
        assert SERVER.process is not None
        first = SERVER.process.pid
        # Another name of the same venv's Python: a Python of its own, its packages the same.
        names = [Path(sys.executable).with_name(n) for n in ("python3", "python3.11", "python")]
        other = next(n for n in names if n.exists() and str(n) != sys.executable)
        monkeypatch.setattr(sys, "executable", str(other))
        submit(backend, "p2", {"t": {"command": ["true"]}})
        wait_for(lambda: ended(backend, "p2"), what="the second run")
        assert SERVER.process is not None and SERVER.process.pid != first
        assert SERVER.process.args[0] == str(other)
    assert phase(backend, "p2") == "Succeeded"
