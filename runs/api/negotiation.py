"""Content negotiation that answers the common requests without parsing an Accept header.

Scripts and the CLI send no ``Accept``, ``*/*`` or ``application/json``: for those DRF's own
negotiation always picks the first renderer (JSON) after parsing and ranking the header, a
third of the cost of a small API answer. Every other request is negotiated by DRF.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request

ANY = (None, "*/*")


class ContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, with the answer it gives to no ``Accept``, ``*/*`` or the first
    renderer's own media type taken without parsing."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: Any = None
    ) -> tuple[BaseRenderer, str]:
        chosen = list(renderers)
        accept = request.META.get("HTTP_ACCEPT")
        overridden = format_suffix or request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)
        first = chosen[0] if chosen and not overridden else None
        if first and "*" not in first.media_type and accept in (*ANY, first.media_type):
            return first, first.media_type
        # Typed here: older stubs of the parent say it returns Any, newer ones say what.
        selected: tuple[BaseRenderer, str] = super().select_renderer(request, chosen, format_suffix)
        return selected
