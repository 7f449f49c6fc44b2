"""The Unix logins simrun users are mapped to (``simrun user NAME --login LOGIN``).

A service run as root for a team submits each user's cluster jobs as that user's login, so
their account and fairshare pay for them; never as root. The rule for a login that may be
mapped is written here once: the command that maps one and the backend that submits as it
both ask it (a login may disappear from the host after it was mapped).
"""

from __future__ import annotations

import pwd


def login_problem(login: str) -> str | None:
    """Why jobs cannot be submitted as ``login`` from this host, None when they can."""
    try:
        entry = pwd.getpwnam(login)
    except KeyError:
        return f"there is no Unix user {login!r} on this host (getent passwd {login})"
    if entry.pw_uid == 0:
        return f"{login!r} is root: simrun never submits a user's jobs as root"
    return None


def login_ids(login: str) -> tuple[int, int]:
    """The user and primary group ids of a login; KeyError for an unknown one."""
    entry = pwd.getpwnam(login)
    return entry.pw_uid, entry.pw_gid
