"""How the dashboard answers a fragment htmx polls: 286 (stop polling) once nothing it shows is
live, so a page stops polling when its run has ended.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.http import HTMX_STOP_POLLING


def fragment(
    request: HttpRequest, template: str, context: dict[str, Any], *, live: bool
) -> HttpResponse:
    """Render a fragment; 286 (stop polling) when nothing it shows is live any more."""
    return render(request, template, context, status=200 if live else HTMX_STOP_POLLING)
