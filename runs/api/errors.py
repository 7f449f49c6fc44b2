"""The API's one answer to simrun's refusals (``runs.common.errors``): their status, their
message as ``detail``; a body that does not parse as a field error of ``body``, as the schema
of a 400 says; every other error as DRF answers it."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.response import Response
from rest_framework.views import exception_handler

from runs.common.errors import Refusal


def answer(error: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``."""
    if isinstance(error, Refusal):
        return Response({"detail": str(error)}, status=error.status_code)
    if isinstance(error, ParseError):
        return Response({"body": [str(error.detail)]}, status=error.status_code)
    return exception_handler(error, context)
