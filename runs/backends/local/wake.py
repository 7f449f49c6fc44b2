"""The socket that wakes the step of the local backend at once, which only the service's own
processes may use.

A datagram to it makes the step look at the runs now instead of at its next poll (a submission,
a process that started or ended). It is a socket file in the backend's own folder
(``<store>/local/wake``, the service's, mode ``0750``), so a task's user cannot even send to it;
where that path is too long for a socket's address (107 bytes), an abstract name, which any
local user can reach. Either way the receiver checks who sent each datagram (``SO_PASSCRED``):
one from a user other than the service's, outside its group, wakes nothing, so a flood of
datagrams never costs a step each; and a wait that dropped ``DRAIN`` of them reads no more
until its poll is due, leaving the flood in the kernel's queue (whose
senders then fail, never block): another user's flood of 5 s cost the step 0.87 s of CPU read
one by one (112,000 datagrams), 0.20 s now (a drain a poll). The service's own wake-ups wait
for that poll meanwhile.

Only the standard library: the launcher imports it from its directory to send to it (``notify``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import select
import socket
import struct
import time
from pathlib import Path

SUN_PATH_MAX = 107
"""The longest path a Unix socket's address holds (its terminating byte aside)."""
SOCKET_MODE = 0o660
"""The service's user and group send to it; nobody else."""
CREDENTIALS = struct.Struct("3i")
"""``struct ucred``: the sender's pid, uid and gid."""
DRAIN = 4096
"""The datagrams read at most per wait, so a flood never keeps the step from stepping."""


def address_of(state: Path) -> str:
    """The address of the step of the backend whose folder is ``state``."""
    path = str(state / "wake")
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return path
    return "\0simrun-local-" + hashlib.sha256(str(state).encode()).hexdigest()[:16]


def listen(address: str) -> socket.socket | None:
    """The socket the step waits on, bound to ``address`` and told to pass the senders'
    credentials; None when another step listens there already (it polls, then)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    try:
        _bind(sock, address)
    except OSError:
        sock.close()
        return None
    return sock


def _bind(sock: socket.socket, address: str) -> None:
    if address.startswith("\0"):
        sock.bind(address)
        return
    try:
        sock.bind(address)
    except OSError as error:
        if error.errno != errno.EADDRINUSE or _listened(address):
            raise
        os.unlink(address)  # left by a step that ended: nobody receives there
        sock.bind(address)
    os.chmod(address, SOCKET_MODE)


def _listened(address: str) -> bool:
    """Whether a socket file is bound by a live socket (a datagram can be sent to it)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(address)
        except ConnectionRefusedError:
            return False
    return True


def wait(sock: socket.socket | None, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for a datagram of the service's; whether one came. Those from
    anyone else are read and dropped, and the wait goes on; once it dropped ``DRAIN`` of them
    (a flood), it reads nothing more until its end."""
    deadline = time.monotonic() + timeout_s
    dropped = 0
    while (left := deadline - time.monotonic()) > 0:
        if sock is None or not select.select([sock], [], [], left)[0]:
            if sock is None:
                time.sleep(left)
            return False
        woken, read = _drain(sock, DRAIN - dropped)
        if woken:
            return True
        dropped += read
        if dropped >= DRAIN:
            time.sleep(max(0.0, deadline - time.monotonic()))
            return False
    return False


def _drain(sock: socket.socket, most: int = DRAIN) -> tuple[bool, int]:
    """Read the datagrams waiting (at most ``most``); whether one was the service's, and how
    many were read."""
    woken = False
    for read in range(most):
        try:
            _, ancillary, _, _ = sock.recvmsg(
                16, socket.CMSG_SPACE(CREDENTIALS.size), socket.MSG_DONTWAIT
            )
        except BlockingIOError:
            return woken, read
        woken = woken or _from_the_service(ancillary)
    return woken, most


def _from_the_service(ancillary: list[tuple[int, int, bytes]]) -> bool:
    """Whether a datagram's credentials are the service's user's or group's (root's too)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            _, uid, gid = CREDENTIALS.unpack(data[: CREDENTIALS.size])
            return uid in (0, os.geteuid()) or gid == os.getegid()
    return False


def close(sock: socket.socket | None, address: str) -> None:
    """Stop listening; a socket file goes with it."""
    if sock is None:
        return
    sock.close()
    if not address.startswith("\0"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)


def notify(address: str, sock: socket.socket | None = None) -> None:
    """Wake the step of the backend (a datagram to its socket, from ``sock`` if given);
    nothing when none listens, nor when its queue is full (never a wait: it polls anyway)."""
    with contextlib.ExitStack() as made, contextlib.suppress(OSError):
        if sock is None:
            sock = made.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
        sock.sendto(b"1", socket.MSG_DONTWAIT, address)
