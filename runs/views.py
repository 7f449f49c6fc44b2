"""The dashboard's pages (HTMX)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.models import Run


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    runs = Run.objects.visible_to(request.user).select_related("owner")[:50]
    return render(request, "runs/run_list.html", {"runs": runs})
