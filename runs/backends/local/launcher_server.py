"""The launcher started ahead: a process that forks a launcher for each launch it is handed.

A new Python for each attempt's launcher costs tens of milliseconds before it does anything
(the interpreter's start and the launcher's imports), most of a trivial run's time through the
service. So the step starts, once per process that steps, ``python launcher.py SOCKET_FD``: a
process that imports the launcher and its siblings and waits on its end of a socket pair. The
step sends it a launch: the launch file, the ``logs/`` folder and the log as
descriptors (``SCM_RIGHTS``), no path nor name. It forks a child which becomes exactly what
``python launcher.py LAUNCH_FD LOGS_FD`` started detached is: a session of its own, stdin
``/dev/null``, stdout and stderr the log, the default signal dispositions, no descriptor but
those three and the two it was handed; then it runs the same ``launcher.run``, which prepares
and starts the process behind its wall (task user, namespaces, cgroups) as before. The child's
pid is the answer. The server itself is started with the launcher's environment and holds
nothing of the service; it is single-threaded, so a fork of it is safe, and it reaps its
children (``SIGCHLD`` ignored; each child restores it before it runs). When its peer goes (the
service's process ended) it exits; the launchers it forked live on, each in its own session,
as those started one by one do.

Only the standard library: ``launcher.py`` runs it from its directory.
"""

from __future__ import annotations

import array
import contextlib
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable

HANDED = 3
"""The descriptors of a launch: its launch file, the ``logs/`` folder and the log."""
ANSWER = struct.Struct("i")
"""The server's answer to a launch: the launcher's pid, or minus the errno of a failed fork."""
DEFAULTS = (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals a launcher started by ``exec`` would find at their default disposition."""


def rights(launch_fd: int, logs_fd: int, log_fd: int) -> list[tuple[int, int, bytes]]:
    """The ancillary data that hands a launch's descriptors to the server."""
    fds = array.array("i", [launch_fd, logs_fd, log_fd])
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())]


def answer(peer: socket.socket) -> int:
    """The server's answer to a launch just handed: the launcher's pid; ``ConnectionError``
    when the server is gone, ``OSError`` when it could not fork."""
    data = peer.recv(ANSWER.size)
    if len(data) != ANSWER.size:
        raise ConnectionError("the launcher server is gone")
    (pid,) = ANSWER.unpack(data)
    if pid <= 0:
        raise OSError(-pid, os.strerror(-pid))
    return int(pid)


def serve(socket_fd: int, run: Callable[[int, int], int]) -> int:
    """Fork a launcher running ``run(launch_fd, logs_fd)`` for each launch handed on the
    socket ``socket_fd`` until its peer closes it; returns 0."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the launchers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with socket.socket(fileno=socket_fd) as peer:
        while True:
            received = _receive(peer)
            if received is None:
                return 0
            try:
                pid = os.fork()
            except OSError as error:
                pid = -(error.errno or 1)
            if pid == 0:
                _become_launcher(peer, run, *received)  # never returns
            for fd in received:
                os.close(fd)
            peer.sendall(ANSWER.pack(pid))


def _receive(peer: socket.socket) -> tuple[int, int, int] | None:
    """The descriptors of the next launch, None once the peer is gone. A message without
    exactly three descriptors is no launch: its descriptors are closed and it gets -EINVAL."""
    while True:
        size = array.array("i").itemsize * HANDED
        data, ancillary, _, _ = peer.recvmsg(1, socket.CMSG_SPACE(size))
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:
            for fd in fds:
                os.close(fd)
            return None
        if len(fds) == HANDED:
            return fds[0], fds[1], fds[2]
        for fd in fds:
            os.close(fd)
        peer.sendall(ANSWER.pack(-22))  # EINVAL


def _become_launcher(
    peer: socket.socket, run: Callable[[int, int], int], launch_fd: int, logs_fd: int, log_fd: int
) -> None:
    """In the forked child: what a launcher started detached by ``exec`` is, then its run."""
    code = 1
    try:
        for signum in DEFAULTS:
            signal.signal(signum, signal.SIG_DFL)
        os.setsid()
        peer.detach()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        keep = sorted({0, 1, 2, launch_fd, logs_fd})
        for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
            os.closerange(low + 1, high)
        for fd in (launch_fd, logs_fd):
            os.set_inheritable(fd, True)  # as ``pass_fds`` left them to a launcher
        code = run(launch_fd, logs_fd)
    except BaseException:  # noqa: BLE001 - a forked child never returns into the server
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
