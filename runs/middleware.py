"""What guards the service's edge before and after a view: request bodies past their cap are
refused before they are read, and a full disk is answered as such instead of with a 500.

A body's cap depends on its path: a run specification (``runs.spec.MAX_DOCUMENT_BYTES``) for
the API, an archive (``runs.snapshots.MAX_ARCHIVE_BYTES``) for snapshot uploads, Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` for the forms of the dashboard and the admin. A body with a
``Content-Length`` past it gets a 413 unread; a chunked one (no length) is received up to the
cap before any view runs (Django would read none of it), and gets a 413 as soon as it passes.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse, JsonResponse

from runs.snapshots import CHUNK, MAX_ARCHIVE_BYTES
from runs.spec import MAX_DOCUMENT_BYTES

logger = logging.getLogger(__name__)

API_BODY_BYTES = MAX_DOCUMENT_BYTES
SNAPSHOT_BODY_BYTES = MAX_ARCHIVE_BYTES
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
"""A write refused by the disk: full, over quota, or mounted read-only."""
STORAGE_LOG_EVERY_S = 60.0


def body_cap(path: str) -> int:
    """The most bytes a request body to ``path`` may hold."""
    if path.startswith("/api/snapshots/"):
        return SNAPSHOT_BODY_BYTES
    if path.startswith("/api/"):
        return API_BODY_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or API_BODY_BYTES


def too_large(request: HttpRequest, cap: int) -> HttpResponse:
    message = f"the request body is larger than {cap} bytes"
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=413)
    return HttpResponse(f"<!doctype html><title>Too large</title><p>{message}.", status=413)


def received(stream: Any, cap: int) -> IO[bytes] | None:
    """A chunked body read to its end into a spooled file, or None past ``cap`` bytes
    (reading stops there)."""
    # Closed when the request that holds it is let go, or here when refused.
    body = tempfile.SpooledTemporaryFile(max_size=CHUNK)  # noqa: SIM115
    size = 0
    while chunk := stream.read(min(CHUNK, cap + 1 - size)):
        size += len(chunk)
        if size > cap:
            body.close()
            return None
        body.write(chunk)
    return body


class BodyLimitMiddleware:
    """413 for a body past its path's cap: from ``Content-Length`` before anything reads it,
    or, for a chunked body, as soon as more than the cap has come."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        cap = body_cap(request.path)
        length = request.META.get("CONTENT_LENGTH") or ""
        try:
            declared = int(length) if length else None
        except ValueError:
            declared = None
        if declared is not None and declared > cap:
            return too_large(request, cap)
        chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if declared is None and chunked and "wsgi.input" in request.META:
            body = received(request.META["wsgi.input"], cap)
            if body is None:
                return too_large(request, cap)
            # Django reads nothing of a body without a length: it gets the one received.
            size = body.seek(0, os.SEEK_END)
            body.seek(0)
            request.META["CONTENT_LENGTH"] = str(size)
            request.META["wsgi.input"] = body
            request._stream = LimitedStream(body, size)  # type: ignore[assignment, arg-type]
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RequestDataTooBig):
            return too_large(request, body_cap(request.path))
        return None


class StorageFullMiddleware:
    """507 for a write the disk refused (full, over quota, read-only): JSON for the API, a short
    page for the dashboard; a log line a minute at most, not a traceback per request."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.lock = threading.Lock()
        self.logged_at: float | None = None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OSError) or exception.errno not in STORAGE_ERRNOS:
            return None
        problem = f"the service cannot write its files: {exception.strerror or exception}"
        self._log(problem, exception)
        response: HttpResponse
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": problem}, status=507)
        else:
            page = f"<!doctype html><title>Storage full</title><p>{problem}. Try again later."
            response = HttpResponse(page, status=507)
        # Django logs every 5xx answer at ERROR (django.request): this one is logged above.
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response

    def _log(self, problem: str, exception: OSError) -> None:
        now = time.monotonic()
        with self.lock:
            if self.logged_at is not None and now - self.logged_at < STORAGE_LOG_EVERY_S:
                return
            self.logged_at = now
        logger.error(
            "%s (at %s)", problem, exception.filename or "?", extra={"errno": exception.errno}
        )
