"""serve names who holds its port: a task of ``SIMRUN_TASK_NETWORK=host`` that took the web port
while serve was stopped is named by its process and its simrun user, not left a guess."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

from runs.cli.listeners import listeners
from runs.cli.serve import port_problem

UID_BASE = 390000


@contextlib.contextmanager
def squatter(uid: int | None) -> Iterator[tuple[int, int]]:
    """A child (as ``uid`` when given: root only) listening on a free loopback port for the
    block; its pid and the port."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(go_w)
            os.close(ready_r)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            server = socket.create_server(("127.0.0.1", 0))
            os.write(ready_w, server.getsockname()[1].to_bytes(2, "big"))
            os.read(go_r, 1)
        finally:
            os._exit(0)
    for fd in (go_r, ready_w):
        os.close(fd)
    try:
        yield pid, int.from_bytes(os.read(ready_r, 2), "big")
    finally:
        os.close(go_w)  # the child's read ends: it exits
        os.close(ready_r)
        os.waitpid(pid, 0)


def test_the_port_a_task_user_holds_is_refused_naming_it(monkeypatch):
    root = os.geteuid() == 0
    monkeypatch.setenv("SIMRUN_TASK_UID_BASE", str(UID_BASE))
    with squatter(UID_BASE + 7 if root else None) as (pid, port):
        found = listeners(port)
        problem = port_problem("127.0.0.1", port)

    assert problem is not None and problem.startswith(f"cannot listen on 127.0.0.1:{port}: ")
    assert f"pid {pid}: " in problem
    if root:  # only root may be another user, and see every process's descriptors
        assert [h.uid for h in found] == [UID_BASE + 7]
        assert f"uid {UID_BASE + 7} (the task user of simrun user 7), pid {pid}" in problem


def test_a_free_port_has_no_listener():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert listeners(port) == [] and port_problem("127.0.0.1", port) is None
