"""Who is asking: the current user, and a token for scripts from a username and password."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from runs.api.schema import FIELD_ERRORS
from runs.api.serializers import MeSerializer


@extend_schema(summary="You", responses={200: MeSerializer})
@api_view(["GET"])
def me(request: Request) -> Response:
    return Response(MeSerializer(request.user).data)


@extend_schema_view(
    post=extend_schema(
        summary="A token for scripts",
        description="The API token of a user, from their username and password.",
        responses={
            200: inline_serializer("Token", {"token": serializers.CharField()}),
            400: FIELD_ERRORS,
        },
    )
)
class TokenView(ObtainAuthToken):
    """``POST username`` and ``password``: the API token of that user (``simrun login``)."""
