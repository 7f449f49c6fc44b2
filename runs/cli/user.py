"""``simrun user NAME``: create a user (or find one) and print an API token for it.

Runs against the service's database (``SIMRUN_HOME`` or ``DATABASE_URL``), like ``serve``.
A new user gets a generated password, printed once, unless ``--password`` gives one.
"""

from __future__ import annotations

import argparse
import secrets
from dataclasses import dataclass

NAME = "user"
HELP = "create a user of the service (or find one) and print an API token"


@dataclass(frozen=True)
class Login:
    """A user's name, the password set now (None when it was not changed) and API token."""

    name: str
    password: str | None
    token: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the user name")
    parser.add_argument("--staff", action="store_true", help="a staff user: sees every run")
    parser.add_argument(
        "--password", help="set this password (a new user gets a generated one otherwise)"
    )


def ensure_user(*, name: str, staff: bool = False, password: str | None = None) -> Login:
    """The user ``name``, created when missing, and its API token (created when missing).

    A new user gets ``password`` or a generated one; an existing user's password changes only
    when ``password`` is given; ``staff`` makes a user staff and superuser, never the reverse.
    """
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user, created = User.objects.get_or_create(username=name)
    if created and password is None:
        password = secrets.token_urlsafe(12)
    if password is not None:
        user.set_password(password)
    if staff:
        user.is_staff = user.is_superuser = True
    user.save()
    token, _ = Token.objects.get_or_create(user=user)
    return Login(name=name, password=password, token=token.key)


def printed(login: Login) -> str:
    """What ``simrun user`` prints: the password set now, if any, and the API token."""
    shown = [f"password: {login.password}"] if login.password is not None else []
    return "\n".join([*shown, f"token: {login.token}"])


def run(args: argparse.Namespace) -> int:
    from django.core.management import call_command

    from runs.cli import home

    home.prepare()
    call_command("migrate", interactive=False, verbosity=0)  # also before the first serve
    print(printed(ensure_user(name=args.name, staff=args.staff, password=args.password)))
    return 0
