"""The step's wake-up socket takes datagrams of the service's own processes only: a task's user
cannot send to its socket file, and a datagram of another user to the abstract name a long
store falls back to wakes nothing (real sockets, real users)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from runs.backends.local import wake as local_wake
from runs.backends.local.backend import LocalBackend
from runs.backends.local.wake import notify
from tests.backends import test_local_isolation as isolation
from tests.backends.local_fixtures import ended, log_of, phase, stepping, submit
from tests.polling import wait_for

home = isolation.home
NOBODY = 65534


def as_nobody(action) -> int:
    """Run ``action`` in a child that dropped to user nobody; its exit code (root only)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = action()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_short_store_has_a_socket_file_and_a_long_one_an_abstract_name(tmp_path):
    assert local_wake.address_of(tmp_path / "local") == str(tmp_path / "local" / "wake")
    long = tmp_path / ("x" * 120) / "local"
    assert local_wake.address_of(long).startswith("\0simrun-local-")


def test_the_service_s_datagram_wakes_the_step(tmp_path):
    address = str(tmp_path / "wake")
    sock = local_wake.listen(address)
    try:
        assert not local_wake.wait(sock, 0.05)
        notify(address)
        assert local_wake.wait(sock, 5)
        assert oct(os.stat(address).st_mode & 0o777) == oct(local_wake.SOCKET_MODE)
    finally:
        local_wake.close(sock, address)
    assert not Path(address).exists()


def test_a_socket_file_a_step_left_is_taken_over_and_a_live_one_is_not(tmp_path):
    address = str(tmp_path / "wake")
    first = local_wake.listen(address)
    assert first is not None
    assert local_wake.listen(address) is None  # another step listens: this one polls
    first.close()  # ended without removing its file
    second = local_wake.listen(address)
    assert second is not None
    local_wake.close(second, address)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's datagram needs root to change user")
def test_another_user_s_datagrams_to_an_abstract_name_wake_nothing(tmp_path):
    address = local_wake.address_of(tmp_path / ("x" * 120) / "local")
    sock = local_wake.listen(address)
    try:

        def flood() -> int:
            for _ in range(1000):
                notify(address)
            return 0

        assert as_nobody(flood) == 0  # a full queue drops a datagram, never blocks a sender
        assert not local_wake.wait(sock, 0.2)
        notify(address)
        assert local_wake.wait(sock, 5)
    finally:
        local_wake.close(sock, address)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's datagram needs root to change user")
def test_a_flood_of_another_user_is_read_one_drain_a_wait_then_left_in_the_queue(
    tmp_path, monkeypatch
):
    """Read one by one, another user's 112,000 datagrams in 5 s cost the step 0.87 s of CPU
    though they woke nothing."""
    address = local_wake.address_of(tmp_path / ("x" * 120) / "local")
    sock = local_wake.listen(address)
    read: list[int] = []
    drain = local_wake._drain

    def counted(sock, most=local_wake.DRAIN):
        woken, count = drain(sock, most)
        read.append(count)
        return woken, count

    def flood() -> int:
        deadline = time.monotonic() + 2
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.setblocking(False)
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    sender.sendto(b"1", address)
        return 0

    monkeypatch.setattr(local_wake, "_drain", counted)
    flooder = threading.Thread(target=as_nobody, args=(flood,))
    flooder.start()
    try:
        assert not local_wake.wait(sock, 1.0)
        flooder.join()
        assert sum(read) <= local_wake.DRAIN, read
        assert not local_wake.wait(sock, 0.5)  # the next poll's wait reads what the queue kept
        notify(address)
        assert local_wake.wait(sock, 5)
    finally:
        flooder.join()
        local_wake.close(sock, address)


FLOOD = (
    "import hashlib, os, socket\n"
    "state = os.path.join(os.environ['SIMRUN_STORE'], 'local')\n"
    "names = [os.path.join(state, 'wake'),\n"
    "         '\\0simrun-local-' + hashlib.sha256(state.encode()).hexdigest()[:16]]\n"
    "sent = 0\n"
    "with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:\n"
    "    for _ in range(20000):\n"
    "        for name in names:\n"
    "            try:\n"
    "                sock.sendto(b'1', name)\n"
    "                sent += 1\n"
    "            except OSError:\n"
    "                pass\n"
    "print('sent', sent)\n"
)
"""A task that floods the step's socket, by its file and by the abstract name it used to have."""


@pytest.mark.django_db
@pytest.mark.skipif(os.geteuid() != 0, reason="task users need root")
def test_a_task_on_the_machine_s_network_cannot_send_to_the_step(home, owner):
    backend = LocalBackend(
        store=home / "store",
        scratch=home / "scratch",
        cores=2,
        memory_gb=8,
        grace_s=1,
        task_uid_base=isolation.UID_BASE,
        task_network="host",
    )
    with stepping(backend):
        submit(
            backend, "flood", {"t": {"command": ["/usr/bin/python3", "-c", FLOOD]}}, owner=owner.id
        )
        wait_for(lambda: ended(backend, "flood"), what="the flood's end")
    log = log_of(backend, "flood", "t", "t").read_text()
    assert phase(backend, "flood") == "Succeeded", log
    assert "sent 0" in log
