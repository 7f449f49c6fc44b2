"""ASGI entry point of the service: Django's WSGI application behind an edge that waits for
no client in a thread (``simrun_site.front`` serves it).

A request's body is received here, on the event loop, before any thread is taken: at most its
path's cap and one byte more (``runs.web.middleware``, which still answers the 413; nothing of
a body declared past its cap, but for the New run form, which shows what fits), within
``SIMRUN_WEB_BODY_TIMEOUT_S`` (then 408), into memory or a temporary file, at most
``SIMRUN_WEB_BODY_BUFFER_MB`` of bodies at once in a worker (then 503). Then Django answers it in
one of ``SIMRUN_WEB_THREADS`` threads of the worker, as under any WSGI server, and its answer
is sent from the loop: a thread never waits for a client, for its request or for its reading.

Not Django's own ASGI handler: it runs each request of a sync view in a thread made for it
(a new database connection each, which ``CONN_MAX_AGE`` cannot keep, and no bound on threads)
and reads a ``FileResponse`` (an output's download) whole into memory.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
MEMORY_BYTES = 1024 * 1024
"""A body up to this size stays in memory; a larger one goes to a temporary file."""
BATCH_BYTES = 256 * 1024
"""A thread produces this much of a streamed answer (a file) before the loop sends it."""


def plain(status: int, text: str, *headers: tuple[bytes, bytes]) -> list[Message]:
    """The messages of a short text answer that closes the connection."""
    body = f"{text}\n".encode()
    start = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
    return [
        {"type": "http.response.start", "status": status, "headers": [*start, *headers]},
        {"type": "http.response.body", "body": body},
    ]


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, None when it has none (chunked) or one that is not a
    number (Django then reads no body)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return None


def environ_of(scope: Scope, body: IO[bytes]) -> dict[str, Any]:
    """The WSGI environment of a request, as gunicorn makes it: the path undecoded, headers
    with an underscore in their name dropped (one could pass for another)."""
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    path = unquote_to_bytes(scope.get("raw_path") or scope["path"].encode()).decode("latin1")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": scope["query_string"].decode("latin1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] or 0),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "REMOTE_ADDR": str(client[0]),
        "REMOTE_PORT": str(client[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin1")
        if "_" in name:
            continue
        key = {"content-length": "CONTENT_LENGTH", "content-type": "CONTENT_TYPE"}.get(
            name, "HTTP_" + name.upper().replace("-", "_")
        )
        value = raw_value.decode("latin1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


class Answer:
    """What a thread made of Django's answer: its start, its first bytes, and the rest of a
    streamed answer for the next batches."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.rest: Iterator[bytes] | None = None
        self.iterable: Iterable[bytes] | None = None

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        self.status = int(status.split(" ", 1)[0])
        self.headers = [(k.lower().encode("latin1"), v.encode("latin1")) for k, v in headers]
        return self.refuse_write

    def refuse_write(self, data: bytes) -> None:
        raise NotImplementedError("write() of WSGI is not supported: return an iterable")

    def batch(self) -> list[bytes]:
        """Up to ``BATCH_BYTES`` of the answer (in a thread); the iterable is closed at its end
        (Django's request_finished, in the thread of the request when it was one batch)."""
        assert self.rest is not None
        found: list[bytes] = []
        size = 0
        for chunk in self.rest:
            if chunk:
                found.append(chunk)
                size += len(chunk)
                if size >= BATCH_BYTES:
                    return found
        self.close()
        return found

    def close(self) -> None:
        close = getattr(self.iterable, "close", None)
        self.rest = None
        if close is not None:
            close()


async def client_left(receive: Receive) -> None:
    """Return once the client left (``http.disconnect``), past what it still sends."""
    while (await receive())["type"] != "http.disconnect":
        pass


class Front:
    """The ASGI app: bodies received on the loop, Django in a bounded pool of threads."""

    def __init__(self, wsgi: Callable[..., Iterable[bytes]]) -> None:
        self.wsgi = wsgi
        self.threads = ThreadPoolExecutor(settings.SIMRUN_WEB_THREADS, thread_name_prefix="web")
        self.body_timeout: float = settings.SIMRUN_WEB_BODY_TIMEOUT_S
        self.buffer_limit: int = settings.SIMRUN_WEB_BODY_BUFFER_MB * 1024 * 1024
        self.buffered = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        wanted, has_body = self.wanted(scope)
        if self.buffered + wanted > self.buffer_limit:
            retry = (b"retry-after", b"5")
            for message in plain(503, "the service is receiving too many bodies", retry):
                await send(message)
            return
        self.buffered += wanted
        try:
            await self.serve(scope, receive, send, wanted, has_body)
        finally:
            self.buffered -= wanted

    @staticmethod
    def wanted(scope: Scope) -> tuple[int, bool]:
        """The bytes of the body to receive before Django sees the request, and whether the
        request has a body at all."""
        from runs.web.middleware import body_cap, reads_past_cap

        cap = body_cap(scope["path"])
        length = declared_length(scope)
        if length is None:
            chunked = any(
                n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in scope["headers"]
            )
            return (cap + 1, True) if chunked else (0, False)
        if length <= cap:
            return length, length > 0
        content_type = next((v for n, v in scope["headers"] if n == b"content-type"), b"")
        form = content_type.split(b";")[0].strip().decode("latin1")
        return (cap if reads_past_cap(scope["method"], form, scope["path"]) else 0), True

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, wanted: int, has_body: bool
    ) -> None:
        body = tempfile.SpooledTemporaryFile(max_size=MEMORY_BYTES)  # noqa: SIM115 - closed below
        try:
            ended: bool | None = not has_body
            if has_body:
                try:
                    async with asyncio.timeout(self.body_timeout):
                        ended = await self.receive_body(receive, body, wanted)
                except TimeoutError:
                    for message in plain(408, "the request's body did not come in time"):
                        await send(message)
                    return
            if ended is None:
                return  # the client left
            body.seek(0)
            await self.answer(environ_of(scope, body), receive, send, ended)
        finally:
            body.close()

    @staticmethod
    async def receive_body(receive: Receive, body: IO[bytes], wanted: int) -> bool | None:
        """Receive up to ``wanted`` bytes of the body into ``body``: whether that was all of it
        (else the connection closes after the answer), None if the client left."""
        size = 0
        more = True
        while more and size < wanted:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            body.write(chunk[: wanted - size])
            size += len(chunk)
            more = message.get("more_body", False)
        return not more and size <= wanted

    async def answer(
        self, environ: dict[str, Any], receive: Receive, send: Send, ended: bool
    ) -> None:
        """Django's answer to the request, made in a thread, sent from the loop; a streamed
        answer in batches, each made once the last was sent, until the client leaves."""
        loop = asyncio.get_running_loop()
        answer, chunks = await loop.run_in_executor(self.threads, self.call, environ)
        headers = answer.headers
        if not ended and not any(name == b"connection" for name, _ in headers):
            headers = [*headers, (b"connection", b"close")]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        if answer.rest is None:
            await send({"type": "http.response.body", "body": b"".join(chunks)})
            return
        # Once the body was received, the client's leaving is what is left to hear of it
        # (a request whose body was never asked for gets it first, as one last message).
        gone = asyncio.ensure_future(client_left(receive)) if ended else None
        try:
            while answer.rest is not None and not (gone and gone.done()):
                body = b"".join(chunks)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                chunks = await loop.run_in_executor(self.threads, answer.batch)
            await send({"type": "http.response.body", "body": b"".join(chunks)})
        finally:
            if gone is not None:
                gone.cancel()
            if answer.rest is not None:
                await loop.run_in_executor(self.threads, answer.close)

    def call(self, environ: dict[str, Any]) -> tuple[Answer, list[bytes]]:
        """Django's answer (in a thread): its start and its first batch."""
        answer = Answer()
        answer.iterable = self.wsgi(environ, answer.start_response)
        answer.rest = iter(answer.iterable)
        return answer, answer.batch()


application = Front(get_wsgi_application())
