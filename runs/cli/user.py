"""``simrun user NAME``: create a user (or find one) and print a new API token for it.

Runs against the service's database (``SIMRUN_HOME`` or ``DATABASE_URL``), like ``serve``.
A new user gets a generated password, printed once, unless ``--password`` gives one. Tokens
are stored hashed: each is printed once, when it is made. ``--revoke`` ends every way in (the
tokens, the password, the browser sessions); running ``simrun user NAME`` again restores it.
``--login LOGIN`` maps the user to a Unix login: a service run as root for a team submits that
user's Slurm jobs as it (docs/slurm.md).
"""

from __future__ import annotations

import argparse
import secrets
from dataclasses import dataclass

from runs.common.logins import login_problem

NAME = "user"
HELP = "create a user of the service (or find one) and print a new API token, or revoke them"


@dataclass(frozen=True)
class Login:
    """A user's name, the password set now (None when it was not changed), the API token made
    now (None when none was) and when it expires (None: never)."""

    name: str
    password: str | None
    token: str | None
    expiry: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the user name")
    parser.add_argument("--staff", action="store_true", help="a staff user: sees every run")
    parser.add_argument(
        "--password", help="set this password (a new user gets a generated one otherwise)"
    )
    parser.add_argument(
        "--days",
        type=int,
        help="the new token expires after this many days (0: never; SIMRUN_TOKEN_DAYS by default)",
    )
    parser.add_argument(
        "--login",
        help="the Unix login this user's cluster jobs are submitted as when the service runs "
        "as root for a team (Slurm); '' removes it",
    )
    parser.add_argument(
        "--revoke",
        action="store_true",
        help="end every way in of the user: API tokens, password, browser sessions "
        "(`simrun user NAME` again gives a new password and token)",
    )


def ensure_user(
    *,
    name: str,
    staff: bool = False,
    password: str | None = None,
    token: bool = True,
    days: int | None = None,
    login: str | None = None,
) -> Login:
    """The user ``name``, created when missing, with a new API token unless ``token`` is false.

    A new user, or one whose access was revoked, gets ``password`` or a generated one; another
    user's password changes only when ``password`` is given; ``staff`` makes a user staff and
    superuser, never the reverse. ``login`` (not None) maps the user to that Unix login ('' unmaps
    it); ValueError, before anything changes, for a login jobs cannot be submitted as.
    """
    from django.contrib.auth.models import User

    from runs.common.tokens import create_token

    if login and (problem := login_problem(login)):
        raise ValueError(f"--login {login}: {problem}")
    user, created = User.objects.get_or_create(username=name)
    if (created or not user.has_usable_password()) and password is None:
        password = secrets.token_urlsafe(12)
    if password is not None:
        user.set_password(password)
    if staff:
        user.is_staff = user.is_superuser = True
    user.save()
    if login is not None:
        from runs.models import Profile

        Profile.objects.update_or_create(user=user, defaults={"login": login})
    if not token:
        return Login(name=name, password=password, token=None)
    record, key = create_token(user, days)
    expiry = record.expiry.isoformat(timespec="seconds") if record.expiry else None
    return Login(name=name, password=password, token=key, expiry=expiry)


def printed(login: Login) -> str:
    """What ``simrun user`` prints: the password set now, if any, and the token made now."""
    shown = [f"password: {login.password}"] if login.password is not None else []
    if login.token is not None:
        until = f"expires {login.expiry}" if login.expiry else "never expires"
        shown.append(f"token: {login.token}  ({until}; shown only now)")
    return "\n".join(shown)


def run(args: argparse.Namespace) -> int:
    from django.core.management import call_command

    from runs.cli import home

    home.prepare()
    call_command("migrate", interactive=False, verbosity=0)  # also before the first serve
    if args.revoke:
        from django.contrib.auth.models import User

        from runs.common.tokens import revoke_access

        user = User.objects.filter(username=args.name).first()
        if user is None:
            print(f"simrun: no user {args.name}")
            return 1
        tokens = revoke_access(user)
        print(
            f"revoked {tokens} token(s) of {args.name}; its password no longer works and its "
            f"browser sessions are ended. `simrun user {args.name}` gives it a new password "
            "and token."
        )
        return 0
    try:
        login = ensure_user(
            name=args.name,
            staff=args.staff,
            password=args.password,
            days=args.days,
            login=args.login,
        )
    except ValueError as error:
        print(f"simrun: {error}")
        return 2
    print(printed(login))
    if args.login is not None:
        mapped = f"as the Unix login {args.login}" if args.login else "as no Unix login"
        print(f"{args.name}'s Slurm jobs are submitted {mapped} in team mode")
    return 0
