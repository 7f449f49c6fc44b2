"""The service's metrics for Prometheus, to staff, the bearer of the metrics token or (when
allowed) anyone on this machine.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST

LOOPBACK = frozenset({"127.0.0.1", "::1"})


def _may_scrape(request: HttpRequest) -> bool:
    """Staff, the bearer of the metrics token, or (when allowed) anyone on this machine."""
    if request.user.is_staff:
        return True
    token = settings.SIMRUN_METRICS_TOKEN
    offered = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if token and hmac.compare_digest(offered.encode(), token.encode()):
        return True
    return settings.SIMRUN_METRICS_LOOPBACK and request.META.get("REMOTE_ADDR") in LOOPBACK


def metrics(request: HttpRequest) -> HttpResponse:
    """The service's metrics for Prometheus (runs/common/metrics.py)."""
    if not _may_scrape(request):
        return HttpResponse(
            "metrics need a staff login or the bearer token SIMRUN_METRICS_TOKEN\n",
            status=403,
            content_type="text/plain",
        )
    from runs.common import metrics as figures  # prometheus-client: only where metrics are asked

    return HttpResponse(figures.exposition(), content_type=CONTENT_TYPE_LATEST)
