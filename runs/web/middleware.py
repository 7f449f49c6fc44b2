"""What guards the service's edge before and after a view: request bodies past their cap are
refused before they are read, and a full disk is answered as such instead of with a 500.

A body's cap depends on its path: a run specification (``runs.planning.spec.MAX_DOCUMENT_BYTES``)
for the API, an archive (``runs.planning.snapshots.MAX_ARCHIVE_BYTES``) for snapshot uploads,
Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` for the forms of the dashboard and the admin. A body with a
``Content-Length`` past it gets a 413 unread; a chunked one (no length) is received up to the
cap before any view runs (Django would read none of it), and gets a 413 as soon as it passes.
The New run form is the exception: its page answers, with what fits of the body
(``past_cap``), so a spec pasted too large is shown again with the error instead of lost.
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
from django.urls import reverse

from runs.planning.snapshots import CHUNK, MAX_ARCHIVE_BYTES
from runs.planning.spec import MAX_DOCUMENT_BYTES

logger = logging.getLogger(__name__)

API_BODY_BYTES = MAX_DOCUMENT_BYTES
SNAPSHOT_BODY_BYTES = MAX_ARCHIVE_BYTES
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
"""A write refused by the disk: full, over quota, or mounted read-only."""
STORAGE_LOG_EVERY_S = 60.0
PAST_CAP = "_simrun_past_cap"


def body_cap(path: str) -> int:
    """The most bytes a request body to ``path`` may hold."""
    if path.startswith("/api/snapshots/"):
        return SNAPSHOT_BODY_BYTES
    if path.startswith("/api/"):
        return API_BODY_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or API_BODY_BYTES


def document_caps(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """drf-spectacular's postprocessing hook: every operation that takes a body documents the
    413 its path's cap answers, so a client (and the schema's fuzz) knows where it can come."""
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            if "requestBody" in operation:
                operation["responses"].setdefault(
                    "413",
                    {
                        "description": f"the request body is larger than {body_cap(path):,} "
                        "bytes, this path's cap: refused before it is read",
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                        },
                    },
                )
    return result


def too_large(request: HttpRequest, cap: int) -> HttpResponse:
    message = f"the request body is larger than {cap} bytes"
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=413)
    return HttpResponse(f"<!doctype html><title>Too large</title><p>{message}.", status=413)


def received(stream: Any, cap: int, keep: bool = False) -> IO[bytes] | None:
    """A chunked body read to its end into a spooled file, or None past ``cap`` bytes
    (reading stops there; with ``keep``, the ``cap`` + 1 bytes read instead)."""
    # Closed when the request that holds it is let go, or here when refused.
    body = tempfile.SpooledTemporaryFile(max_size=CHUNK)  # noqa: SIM115
    size = 0
    while chunk := stream.read(min(CHUNK, cap + 1 - size)):
        size += len(chunk)
        body.write(chunk)
        if size > cap:
            if keep:
                return body
            body.close()
            return None
    return body


def past_cap(request: HttpRequest) -> tuple[int | None, int] | None:
    """For a New run form past its cap, cut to it: the body's size (None: chunked, unknown)
    and the cap; None for a body that was within it."""
    found: tuple[int | None, int] | None = getattr(request, PAST_CAP, None)
    return found


def keeps_what_fits(request: HttpRequest) -> bool:
    """Whether a body past its cap is cut to it rather than refused: the New run form, whose
    page shows the error beside what fits of the spec."""
    return reads_past_cap(request.method or "", request.content_type or "", request.path)


def reads_past_cap(method: str, content_type: str, path: str) -> bool:
    """``keeps_what_fits`` of a request not made yet (the web front receives its body)."""
    return (
        method == "POST"
        and content_type == "application/x-www-form-urlencoded"
        and path == reverse("runs:run-new")
    )


def cut_to_cap(request: HttpRequest, stream: Any, cap: int, size: int | None) -> HttpRequest:
    """The request with its body's first ``cap`` bytes only, marked (``past_cap``) and logged
    in one line. The fields before the spec (the CSRF token, ``rerun_of``) stay whole."""
    body = tempfile.SpooledTemporaryFile(max_size=CHUNK)  # noqa: SIM115 - the request's now
    kept = 0
    while kept < cap and (chunk := stream.read(min(CHUNK, cap - kept))):
        body.write(chunk)
        kept += len(chunk)
    body.seek(0)
    request.META["CONTENT_LENGTH"] = str(kept)
    request.META["wsgi.input"] = body
    request._stream = LimitedStream(body, kept)  # type: ignore[assignment, arg-type]
    setattr(request, PAST_CAP, (size, cap))
    logger.warning(
        "a form to %s is past its cap of %d bytes (%s): shown again with what fits",
        request.path,
        cap,
        f"{size} bytes" if size is not None else "chunked",
    )
    return request


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
            if keeps_what_fits(request) and "wsgi.input" in request.META:
                cut = cut_to_cap(request, request.META["wsgi.input"], cap, declared)
                return self.answer_cut(cut)
            return too_large(request, cap)
        chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if declared is None and chunked and "wsgi.input" in request.META:
            keep = keeps_what_fits(request)
            body = received(request.META["wsgi.input"], cap, keep=keep)
            if body is not None and keep and body.seek(0, os.SEEK_END) > cap:
                body.seek(0)
                return self.answer_cut(cut_to_cap(request, body, cap, None))
            if body is None:
                return too_large(request, cap)
            # Django reads nothing of a body without a length: it gets the one received.
            size = body.seek(0, os.SEEK_END)
            body.seek(0)
            request.META["CONTENT_LENGTH"] = str(size)
            request.META["wsgi.input"] = body
            request._stream = LimitedStream(body, size)  # type: ignore[assignment, arg-type]
        return self.get_response(request)

    def answer_cut(self, request: HttpRequest) -> HttpResponse:
        """The New run page's answer to a form cut to its cap (its 413), logged already."""
        response = self.get_response(request)
        response._has_been_logged = True  # type: ignore[attr-defined]  # by cut_to_cap
        return response

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
