"""Who is asking: the current user, and a token for scripts from a username and password."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from runs.api.serializers import MeSerializer


@extend_schema(summary="You", responses={200: MeSerializer})
@api_view(["GET"])
def me(request: Request) -> Response:
    return Response(MeSerializer(request.user).data)


class TokenView(ObtainAuthToken):
    """``POST username`` and ``password``: the API token of that user (``simrun login``)."""
