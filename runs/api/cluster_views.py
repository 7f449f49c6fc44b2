"""The machines: nodes with their reservations and usage, the pods placed now, releases."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import APIException, NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from runs.api import schema
from runs.api.serializers import NodeSerializer, PlacementSerializer
from runs.control import reservations
from runs.reads import capacity


class Unavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "the backend did not answer; try again"


def _cluster(request: Request) -> list[capacity.NodeUse]:
    try:
        return capacity.cluster_for(request.user)
    except capacity.BackendUnavailable as error:
        raise Unavailable(f"the backend did not answer: {error}") from None


@extend_schema(
    summary="Placements",
    description="The pods (processes) of your runs that have not terminated (staff: all).",
    responses={200: PlacementSerializer(many=True), 503: schema.UNAVAILABLE},
)
@api_view(["GET"])
def placement_list(request: Request) -> Response:
    pods = [pod for use in _cluster(request) for pod in use.pods]
    return Response(PlacementSerializer(pods, many=True).data)


@extend_schema(
    summary="Nodes",
    description="The nodes with their cores and memory, what the pods on them take, and "
    "which run holds each reserved one (shown when it is yours, to staff always).",
    responses={200: NodeSerializer(many=True), 503: schema.UNAVAILABLE},
)
@api_view(["GET"])
def node_list(request: Request) -> Response:
    nodes = [use for use in _cluster(request) if use.node is not None]
    return Response(NodeSerializer(nodes, many=True).data)


@extend_schema(
    summary="Release a reservation (staff)",
    description="Marks the ended run that holds the node to release it; the control loop "
    "removes the taint and label, retrying until it succeeds.",
    request=None,
    parameters=[schema.path("name", schema.NODE, "the node's name")],
    responses={
        202: inline_serializer(
            "Release", {"node": serializers.CharField(), "run": serializers.CharField()}
        ),
        403: schema.FORBIDDEN,
        404: schema.NOT_FOUND,
        409: OpenApiResponse(
            schema.CONFLICT.response, description="no ended run of the record holds it"
        ),
        503: schema.UNAVAILABLE,
    },
)
@api_view(["POST"])
def node_release(request: Request, name: str) -> Response:
    if not request.user.is_staff:
        raise PermissionDenied("only staff release reservations")
    node = next((use for use in _cluster(request) if use.name == name and use.node), None)
    holder = reservations.holder_of(node=name, reserved_by=node.reserved_run if node else None)
    if node is None and holder is None:
        raise NotFound(f"no node {name!r}")
    if holder is None:
        return Response(
            {"detail": f"no run of the record holds {name}"}, status=status.HTTP_409_CONFLICT
        )
    try:
        reservations.release_reservation(run=holder, node=name)
    except reservations.ReleaseRefused as error:
        return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
    return Response({"node": name, "run": holder.id}, status=status.HTTP_202_ACCEPTED)
