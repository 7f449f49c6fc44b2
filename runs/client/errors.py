"""What can go wrong talking to a simrun server, one exception type per thing a caller handles.

Every message says what happened and what to do; ``SimrunError`` catches them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx


class SimrunError(Exception):
    """Any failure of the client: its message is meant for the person who called it."""


class NotConfigured(SimrunError):
    """No server or no token: neither given, in the environment nor saved by ``simrun login``."""


class LocalFileError(SimrunError):
    """A file or folder the client was to read (a spec, a source tree) is missing or unreadable."""


class Unavailable(SimrunError):
    """No answer from the server: not running, unreachable or too slow."""


class ServerError(Unavailable):
    """The server answered with an error of its own (5xx)."""


class AuthError(SimrunError):
    """The server refused the token, or the username and password."""


class Throttled(AuthError):
    """Too many failed logins: ``retry_after`` says in how many seconds to try again."""

    def __init__(self, message: str, retry_after: str = "") -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Forbidden(SimrunError):
    """The user may not do this (403)."""


class NotFound(SimrunError):
    """No such run, task, log or output among those the user may see (404)."""


class Ambiguous(SimrunError):
    """A call that must pick one of several, e.g. the task of a run with more than one table."""


class Conflict(SimrunError):
    """The action does not fit the run's state, e.g. cancelling a run that ended (409)."""


class InvalidRequest(SimrunError):
    """The server refused a spec or a parameter (400); ``fields`` holds the problems by the
    path of their field (``tasks.sweep.settings.n``), and the message names each."""

    def __init__(self, message: str, fields: Mapping[str, list[str]], problems: str) -> None:
        super().__init__(message)
        self.fields = dict(fields)
        self.problems = problems
        """The problems one per line, by the path of their field."""


class RunFailed(SimrunError):
    """A run waited for ended without success; ``run`` is the run as it ended."""

    def __init__(self, message: str, run: Any) -> None:
        super().__init__(message)
        self.run = run


class MissingPandas(SimrunError, ImportError):
    """``frame()`` needs pandas, which is not installed."""


def field_problems(body: Any) -> dict[str, list[str]]:
    """A 400's body as problems by the path of their field (a bare message under ``""``)."""
    if isinstance(body, Mapping):
        return {
            str(path): [str(p) for p in problems] if isinstance(problems, list) else [str(problems)]
            for path, problems in body.items()
        }
    return {"": [str(body)]}


def problem_lines(fields: Mapping[str, list[str]]) -> str:
    """Problems one per line, indented, each after the path of its field."""
    return "\n".join(
        f"  {path}: {' '.join(problems)}" if path else f"  {' '.join(problems)}"
        for path, problems in fields.items()
    )


def answer_detail(response: httpx.Response) -> str:
    """What an answer that is no success says: its ``detail``, its problems by field, or its
    text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase
    if isinstance(body, Mapping) and "detail" in body:
        return str(body["detail"])
    return problem_lines(field_problems(body))


def answer_body(response: httpx.Response) -> Any:
    """An answer's JSON body, else its text."""
    try:
        return response.json()
    except ValueError:
        return response.text


def no_run(run_id: str) -> str:
    """The message for a run the server does not know or does not show this user."""
    return f"not found: no run {run_id!r} among the runs you may see"
