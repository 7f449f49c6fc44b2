"""Who is asking: the current user, and a token for scripts from a username and password."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.decorators import api_view
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.api.schema import FIELD_ERRORS, LOCKED_OUT
from runs.api.serializers import MeSerializer
from runs.common.tokens import create_token


@extend_schema(summary="You", responses={200: MeSerializer})
@api_view(["GET"])
def me(request: Request) -> Response:
    return Response(MeSerializer(request.user).data)


class TokenView(APIView):
    """``POST username`` and ``password``: a new API token of that user (``simrun login``),
    shown this once; only its digest is stored."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    serializer_class = AuthTokenSerializer

    @extend_schema(
        summary="A token for scripts",
        description="A new API token of a user, from their username and password. It is "
        "shown only in this answer and expires at `expiry` (null: never).",
        request=AuthTokenSerializer,
        responses={
            200: inline_serializer(
                "Token",
                {"token": serializers.CharField(), "expiry": serializers.DateTimeField()},
            ),
            400: FIELD_ERRORS,
            429: LOCKED_OUT,
        },
    )
    def post(self, request: Request) -> Response:
        data = request.data  # a body that does not parse: runs.api.errors answers it
        # Django's request, which login throttling (runs.common.login_throttle) marks when locked
        # out.
        serializer = AuthTokenSerializer(data=data, context={"request": request._request})
        serializer.is_valid(raise_exception=True)
        record, token = create_token(serializer.validated_data["user"])
        return Response({"token": token, "expiry": record.expiry})
