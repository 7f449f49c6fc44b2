"""Password guessing is throttled (django-axes): after ``AXES_FAILURE_LIMIT`` failures of a
username, or from an address, logging in is refused for ``AXES_COOLOFF_TIME``, even with the
right password, at ``/login/``, ``/admin/login/`` and ``/api/token/``.

This module says how a locked-out login is answered (429 with ``Retry-After``, JSON for the
API) and which address a request comes from behind ``SIMRUN_PROXY_HOPS`` proxies.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


def retry_after_s() -> int:
    """The seconds a lockout lasts (from its last failure)."""
    return int(settings.AXES_COOLOFF_TIME.total_seconds())


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """429 Too Many Requests with ``Retry-After``: JSON under /api/, a short page elsewhere."""
    seconds = retry_after_s()
    message = (
        f"too many failed logins: logging in is refused for {seconds // 60} minutes "
        f"(from the last failure)"
    )
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": message}, status=429)
    else:
        page = f"<!doctype html><title>Too many failed logins</title><p>{message}."
        response = HttpResponse(page, status=429)
    response["Retry-After"] = str(seconds)
    return response


def client_ip(request: HttpRequest) -> str | None:
    """The address of the client: ``REMOTE_ADDR``, or behind ``SIMRUN_PROXY_HOPS`` proxies the
    address the outermost of them saw (appended last to ``X-Forwarded-For`` by each)."""
    hops: int = settings.SIMRUN_PROXY_HOPS
    if hops:
        forwarded: list[str] = [
            part.strip()
            for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if part.strip()
        ]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    address = request.META.get("REMOTE_ADDR")
    return str(address) if address else None


class ThrottleBackend(AxesStandaloneBackend):  # type: ignore[misc]  # axes has no types
    """Axes's check before the password's, for logins made through a request (the login page,
    the admin, the API's token). A call without one is the service's own (a management
    command, a test client's ``login``): there is no address to throttle."""

    def authenticate(
        self,
        request: HttpRequest | None = None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is not None:
            super().authenticate(request, username, password, **kwargs)  # raises when locked
