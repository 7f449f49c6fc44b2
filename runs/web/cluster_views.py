"""The machines pages: the pods running now on each node (placements), and the reserved
nodes with their release (staff).

Every fragment has its own URL and its own view, which checks who may see it exactly as its
page does: a fragment can be asked for directly.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from runs.backends import get_backend
from runs.control import reservations
from runs.reads import capacity
from runs.web.fragments import fragment


def _cluster_context(request: HttpRequest) -> dict[str, Any]:
    try:
        nodes = capacity.cluster_for(request.user)
    except capacity.BackendUnavailable as error:
        return {"nodes": [], "error": str(error), "live": True}
    return {"nodes": nodes, "error": "", "live": any(use.pod_count for use in nodes)}


@login_required
def placements(request: HttpRequest) -> HttpResponse:
    """The pods (processes) running now, grouped by node, with each node's use as bars."""
    return render(request, "runs/placements.html", _cluster_context(request))


@login_required
def placements_live(request: HttpRequest) -> HttpResponse:
    context = _cluster_context(request)
    return fragment(request, "runs/placements.html#nodes", context, live=context["live"])


@login_required
def nodes(request: HttpRequest) -> HttpResponse:
    """Reservations: the nodes, the run holding each, release (staff); why runs may not
    reserve a node where the backend offers no reservations."""
    context = _cluster_context(request)
    context["nodes"] = [use for use in context["nodes"] if use.node is not None]
    backend = get_backend()
    context["no_reservations"] = "" if backend.reserves_nodes else backend.no_reservations
    return render(request, "runs/nodes.html", context)


@login_required
@require_POST
def node_release(request: HttpRequest, name: str) -> HttpResponse:
    if not request.user.is_staff:
        raise PermissionDenied("only staff release reservations")
    context = _cluster_context(request)
    node = next((use for use in context["nodes"] if use.name == name and use.node), None)
    holder = reservations.holder_of(node=name, reserved_by=node.reserved_run if node else None)
    if holder is None:
        messages.warning(request, f"No run of the record holds {name}.")
    else:
        try:
            reservations.release_reservation(run=holder, node=name)
        except reservations.ReleaseRefused as error:
            messages.warning(request, str(error))
        else:
            messages.success(request, f"{name} will be released from run {holder.id}.")
    return redirect("runs:nodes")
