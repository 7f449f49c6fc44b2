"""The web server's workers: uvicorn's event loop reads every request, so a slow client costs
a socket, never a thread (``simrun serve`` and the compose file run gunicorn with
``--worker-class simrun_site.front.Worker``).

gunicorn's master still runs the workers (``--workers``, ``--reuse-port``, the hooks of
``simrun_site.gunicorn``); each serves ``simrun_site.asgi`` through ``Protocol``, uvicorn's
HTTP/1.1 with what it lacks: a deadline for a request's head (``SIMRUN_WEB_HEADER_TIMEOUT_S``
from the connection's opening, or from the first byte of the next request on a kept-alive
one: 408, closed) and a bound on its size (``SIMRUN_WEB_HEADER_BYTES``: 431, closed). Past
``SIMRUN_WEB_MAX_CONNECTIONS`` connections of a worker, a request is answered 503. A client's
address is its connection's: only the login throttle reads ``X-Forwarded-For``, behind
``SIMRUN_PROXY_HOPS`` proxies.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker

from simrun_site.gunicorn import leave

REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}
HEADER_OVERHEAD = 4
"""The bytes of a header's line besides its name and value (``: `` and CRLF)."""


class Protocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 with a deadline and a size bound for each request's head."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from django.conf import settings

        super().__init__(*args, **kwargs)
        self.head_timeout: float = settings.SIMRUN_WEB_HEADER_TIMEOUT_S
        self.head_limit: int = settings.SIMRUN_WEB_HEADER_BYTES
        self.head_timer: asyncio.TimerHandle | None = None
        self.head_size = 0
        self.refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_came()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_size = 0
        if self.head_timer is None:
            self.await_head()

    def on_url(self, url: bytes) -> None:
        if self.counted(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.counted(len(name) + len(value) + HEADER_OVERHEAD):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.head_came()
        if not self.refused:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self.refused:
            super().on_message_complete()

    def await_head(self) -> None:
        self.head_timer = self.loop.call_later(self.head_timeout, self.refuse, 408)

    def head_came(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def counted(self, size: int) -> bool:
        """Whether the head is still within its bound with ``size`` more bytes; if not, it
        is refused."""
        self.head_size += size
        if self.head_size > self.head_limit and not self.refused:
            self.refuse(431)
        return not self.refused

    def refuse(self, status: int) -> None:
        """Answer ``status`` and close; a response under way (pipelining) ends first."""
        self.refused = True
        self.head_came()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
            return
        if self.transport.is_closing():
            return
        reason = REASONS[status]
        body = f"{reason}\n".encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


class Worker(UvicornWorker):  # type: ignore[misc]  # uvicorn-worker has no types
    """A gunicorn worker serving the ASGI app with uvicorn and ``Protocol``."""

    CONFIG_KWARGS = {
        "loop": "uvloop",
        "http": Protocol,
        "ws": "none",
        "lifespan": "off",
        # X-Forwarded-For is the login throttle's to read (SIMRUN_PROXY_HOPS), not uvicorn's.
        "proxy_headers": False,
        "server_header": False,
    }

    def init_signals(self) -> None:
        # From its start, not only once it serves: a Ctrl-C while a worker still boots killed
        # it by SIGINT (uvicorn-worker resets it to the default), which the master reports.
        super().init_signals()
        signal.signal(signal.SIGINT, leave_now)

    async def _serve(self) -> None:
        from django.conf import settings

        # uvicorn answers 503 once a worker has this many connections (its own included).
        self.config.limit_concurrency = settings.SIMRUN_WEB_MAX_CONNECTIONS + 1
        # Once uvicorn has set its handlers: Ctrl-C (SIGINT) leaves at once, as the master's
        # quick stop (SIGQUIT) does; SIGTERM stays uvicorn's graceful stop.
        asyncio.get_running_loop().call_soon(signal.signal, signal.SIGINT, leave_now)
        await super()._serve()

    async def callback_notify(self) -> None:
        # uvicorn calls it every gunicorn timeout; the master is gone when the parent changed
        # (killed outright, it stops no worker), and its workers then served on for ever.
        if os.getppid() != self.ppid:
            self.log.warning("simrun: the web server's master is gone; its worker leaves")
            leave(1)
        await super().callback_notify()

    def _install_sigquit_handler(self) -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGQUIT, leave, 0)


def leave_now(*_: object) -> None:
    leave(0)
