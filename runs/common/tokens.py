"""API tokens, made and revoked: stored hashed (django-rest-knox), with an expiry.

A token is shown once, when it is made (``simrun user``, ``simrun login``, ``serve --demo``,
the admin); the database keeps only its digest, so a copy of the database gives no token.
Apart from the API's authentication (``runs.api.authentication``), which imports the REST
framework: ``simrun serve --demo`` makes its token while the service's processes start, and
that import was a quarter of a second of their two cores.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from knox.models import AuthToken


def create_token(user: AbstractBaseUser, days: int | None = None) -> tuple[AuthToken, str]:
    """A new token of a user, expiring after ``days`` (``SIMRUN_TOKEN_DAYS`` by default; 0:
    never): its record and the token itself, which only the caller ever sees."""
    days = settings.SIMRUN_TOKEN_DAYS if days is None else days
    record, token = AuthToken.objects.create(
        user=user, expiry=timedelta(days=days) if days else None
    )
    return record, str(token)


def revoke_tokens(user: AbstractBaseUser) -> int:
    """Revoke every token of a user; how many there were."""
    deleted, _ = AuthToken.objects.filter(user=user).delete()
    return int(deleted)


def revoke_access(user: AbstractBaseUser) -> int:
    """End every way in of a user: their tokens, their password (made unusable, so no login
    and no new token from ``/api/token/``) and with it their browser sessions, which Django
    checks against the password on every request. How many tokens there were."""
    user.set_unusable_password()
    user.save(update_fields=["password"])
    return revoke_tokens(user)
