"""API tokens sent as ``Token`` or ``Bearer``, checked against their digests (django-rest-knox);
made and revoked by ``runs.common.tokens``."""

from __future__ import annotations

import binascii
from collections.abc import Iterator
from hmac import compare_digest
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections, router
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.models import AuthToken
from knox.settings import CONSTANTS
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.request import Request

from runs.common.prepared import prepared_rows
from runs.common.user_backend import USER_COLUMNS, USER_FIELDS

SCHEMES = (b"token", b"bearer")
INVALID = "Invalid token."


class TokenAuthentication(KnoxTokenAuthentication):  # type: ignore[misc]  # knox is untyped
    """Knox's hashed tokens under either scheme: ``Authorization: Token …`` or ``Bearer …``."""

    def authenticate(self, request: Request) -> Any:
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() not in SCHEMES:
            return None  # another scheme (or none): the session may authenticate
        if len(auth) != 2:
            raise exceptions.AuthenticationFailed("Give one token after the scheme.")
        return self.authenticate_credentials(auth[1])

    def authenticate_credentials(self, token: bytes) -> Any:
        """The user of a token in one query: its row by the token's key, then its digest.

        Knox also reads all the user's other tokens on every request to delete the expired
        ones; here an expired token is refused (and deleted) when it is used, and the others
        wait for theirs: the cost of a request does not grow with the tokens a user made.
        """
        try:
            text = token.decode()
            digest = hash_token(text)
        except (UnicodeDecodeError, TypeError, binascii.Error):
            raise exceptions.AuthenticationFailed(INVALID) from None
        now = timezone.now()
        for record in tokens_of_key(text[: CONSTANTS.TOKEN_KEY_LENGTH]):
            if not compare_digest(digest, record.digest):
                continue
            if record.expiry is not None and record.expiry < now:
                record.delete()
                break
            return self.validate_user(record)
        raise exceptions.AuthenticationFailed(INVALID)


def _token_users() -> str:
    """The users of the tokens of a key, each with its token's digest, creation and expiry."""
    users, tokens = get_user_model()._meta, AuthToken._meta
    user_id = tokens.get_field("user").column
    return (
        f'SELECT {USER_COLUMNS}, "{tokens.db_table}"."digest", "{tokens.db_table}"."created", '
        f'"{tokens.db_table}"."expiry" '
        f'FROM "{users.db_table}" JOIN "{tokens.db_table}" '
        f'ON "{tokens.db_table}"."{user_id}" = "{users.db_table}"."{users.pk.column}" '
        f'WHERE "{tokens.db_table}"."token_key" = %s'
    )


TOKEN_USERS = _token_users()


def tokens_of_key(key: str) -> Iterator[AuthToken]:
    """The tokens whose key (first characters) is ``key``, each with its user: one query.

    On PostgreSQL the query is written out (building it through the ORM on every request
    cost twice what running it does) and prepared, planned once per connection
    (``runs.common.prepared``). Elsewhere the ORM builds it: SQLite gives the token's columns of a
    written-out query as text, which only the ORM turns into times.
    """
    users = get_user_model()
    connection = connections[router.db_for_read(AuthToken)]
    if connection.vendor != "postgresql":
        yield from AuthToken.objects.filter(token_key=key).select_related("user")
        return
    for *columns, digest, created, expiry in prepared_rows(connection, TOKEN_USERS, [key]):
        user = users.from_db(connection.alias, USER_FIELDS, columns)
        yield AuthToken(digest=digest, token_key=key, user=user, created=created, expiry=expiry)


class TokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The scheme in the OpenAPI schema: a bearer token (``Token`` works the same)."""

    target_class = "runs.api.authentication.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token: `Authorization: Bearer <token>` (or `Token <token>`).",
        }
