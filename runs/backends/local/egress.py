"""The way out of a walled build whose packages come from an index on the network: a proxy
that reaches other machines, never this one.

A build behind its wall (``wall``) has a network namespace of its own, so it can reach no
port of this machine: not the web's, PostgreSQL's or Redis's. pip must still fetch from its
index. So the wall (``network="proxy"``) forks a *dialer* before it leaves the machine's
network: a process that stays there and, asked for ``host:port`` over a socket pair, connects
and hands the connected socket back (``SCM_RIGHTS``), unless the host is this machine (a
loopback address, or one of its interfaces': one a socket can be bound to), which it refuses
without connecting. In the build's namespace the wall
then runs a proxy on its loopback (``HTTPS_PROXY``/``HTTP_PROXY`` of the build): a
``CONNECT host:port`` (https) is answered with a socket from the dialer; a plain-http request
(``GET http://host/...``) is passed on, as it came, to the host of its first line. The bytes
are relayed as they are: the build sees its index, and nothing of this machine.

Only the standard library: the wall imports it from its directory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import select
import socket
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

HEAD_CAP = 16 << 10
"""The most of a request's head the proxy reads before it answers."""
DIAL_TIMEOUT_S = 30.0
CHUNK = 1 << 16


def is_local(address: str) -> bool:
    """Whether an address is this machine's: loopback, unspecified, or one a socket can be
    bound to here (an address of one of its interfaces)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    if (
        ip.is_loopback
        or ip.is_unspecified
        or (mapped and (mapped.is_loopback or mapped.is_unspecified))
    ):
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def dial(host: str, port: int) -> socket.socket:
    """A socket connected to ``host:port`` on another machine; ``PermissionError`` when the
    host is this machine (no connection is made), ``OSError`` when it cannot be reached.
    The address checked is the address connected to (no second lookup)."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not found or any(is_local(str(sockaddr[0])) for *_, sockaddr in found):
        raise PermissionError(f"{host}:{port} is this machine: a build reaches no port of it")
    family, kind, proto, _, sockaddr = found[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.settimeout(DIAL_TIMEOUT_S)
        sock.connect(sockaddr)
        sock.settimeout(None)
    except OSError:
        sock.close()
        raise
    return sock


def serve_dialer(channel: socket.socket) -> None:
    """The dialer's loop (in the machine's network): read ``host:port``, answer with a
    connected socket or ``!why``; until the channel closes."""
    while True:
        try:
            asked = channel.recv(1024).decode(errors="replace")
        except OSError:
            return
        if not asked:
            return
        host, _, port = asked.rpartition(":")
        try:
            sock = dial(host.strip("[]"), int(port))
        except (OSError, ValueError) as error:
            channel.send(f"!{error}".encode()[:1000])
            continue
        with sock:
            socket.send_fds(channel, [b"+"], [sock.fileno()])


def start_dialer() -> socket.socket:
    """Fork the dialer (still in the machine's network); the wall's end of its channel."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if os.fork() == 0:  # pragma: no cover - the dialer, measured by the wall's tests
        mine.close()
        try:
            serve_dialer(theirs)
        finally:
            os._exit(0)
    theirs.close()
    return mine


class Proxy:
    """The proxy on the build's own loopback, dialing out through the dialer's channel."""

    def __init__(self, channel: socket.socket, bind: Callable[[], None]) -> None:
        """``bind`` moves this process into the build's network first (after the dialer
        was forked in the machine's)."""
        self.channel = channel
        self.asking = threading.Lock()
        bind()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _ask(self, host: str, port: int) -> socket.socket:
        with self.asking:
            self.channel.send(f"{host}:{port}".encode())
            said, fds, _, _ = socket.recv_fds(self.channel, 1024, 1)
        if not fds:
            raise PermissionError(said.decode(errors="replace").lstrip("!"))
        return socket.socket(fileno=fds[0])

    def _serve(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < HEAD_CAP:
                chunk = client.recv(CHUNK)
                if not chunk:
                    return
                head += chunk
            method, target, _ = (head.split(b"\r\n", 1)[0].decode(errors="replace") + "  ").split(
                " ", 2
            )
            try:
                if method.upper() == "CONNECT":
                    host, _, port = target.rpartition(":")
                    upstream = self._ask(host.strip("[]"), int(port))
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    head = b""
                else:
                    url = urlsplit(target)
                    upstream = self._ask(url.hostname or "", url.port or 80)
            except (OSError, ValueError) as error:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                print(f"simrun: the build's proxy refused {target}: {error}", flush=True)
                return
            with upstream:
                if head:
                    upstream.sendall(head)
                _relay(client, upstream)


def _relay(one: socket.socket, other: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    sockets = [one, other]
    while True:
        ready, _, _ = select.select(sockets, [], [])
        for sock in ready:
            with contextlib.suppress(OSError):
                data = sock.recv(CHUNK)
                if data:
                    (other if sock is one else one).sendall(data)
                    continue
            return
