"""What the client subcommands share: the REST API as they use it (``runs.client``'s, with
exit codes), how they report a failure, the console they print tables to.

The server and token come from ``SIMRUN_URL`` and ``SIMRUN_TOKEN``, else from the file
``simrun login`` writes (``$XDG_CONFIG_HOME/simrun/config.json``). Every failure a user can
meet (no server, a refused token, a bad spec, an unknown run) is a ``CliError`` whose message
says what happened and what to do, and whose code is the command's exit code; no traceback.
The HTTP calls themselves are ``runs.client.Client``'s. Never imports Django.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape

from runs.cli.inert import inert_response
from runs.client import api, errors
from runs.client.config import TIMEOUT_S, Settings
from runs.client.config import settings as client_settings

PIPED_WIDTH = 10_000
"""The width of the output of a command piped to a file or a program: no table cell cut."""

EXIT_OK = 0
EXIT_RUN_FAILED = 1
"""The run failed or was cancelled, or the server refused the action (e.g. cancel an ended run)."""
EXIT_BAD_INPUT = 2
"""A bad specification, a missing file, bad arguments."""
EXIT_UNAVAILABLE = 3
"""No server, a refused token, a server error."""

EXIT_CODES: list[tuple[type[errors.SimrunError], int]] = [
    (errors.Forbidden, EXIT_RUN_FAILED),
    (errors.Conflict, EXIT_RUN_FAILED),
    (errors.RunFailed, EXIT_RUN_FAILED),
    (errors.NotFound, EXIT_BAD_INPUT),
    (errors.Ambiguous, EXIT_BAD_INPUT),
    (errors.InvalidRequest, EXIT_BAD_INPUT),
    (errors.LocalFileError, EXIT_BAD_INPUT),
]
"""The exit code of each failure of the client; any other is ``EXIT_UNAVAILABLE``."""


class CliError(Exception):
    """A failure to report in one message, with the exit code of the command."""

    def __init__(self, message: str, code: int = EXIT_UNAVAILABLE, problems: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.problems = problems
        """A 400's problems by field path, one per line."""


@contextmanager
def as_cli_errors() -> Iterator[None]:
    """Turn the client's failures into ``CliError``, with their exit codes."""
    try:
        yield
    except errors.SimrunError as error:
        code = next((c for kind, c in EXIT_CODES if isinstance(error, kind)), EXIT_UNAVAILABLE)
        problems = error.problems if isinstance(error, errors.InvalidRequest) else ""
        raise CliError(str(error), code, problems) from None


def settings() -> Settings:
    """The server and token: the environment first, then the saved configuration."""
    with as_cli_errors():
        return client_settings()


class Client(api.Client):
    """``runs.client.Client`` whose failures are ``CliError`` and whose answers are
    ``inert``: nothing a task wrote reaches the terminal as a control sequence."""

    def __init__(self, config: Settings | None = None, *, timeout: float = TIMEOUT_S) -> None:
        config = config or settings()
        with as_cli_errors():
            super().__init__(config.url, config.token, timeout=timeout)

    def request(
        self, method: str, path: str, *, missing: str = "", **kwargs: Any
    ) -> httpx.Response:
        with as_cli_errors():
            return inert_response(super().request(method, path, missing=missing, **kwargs))


def tables_console() -> Console:
    """The console of a command that prints tables: a terminal's width, else (piped, with no
    ``COLUMNS`` asked) wide enough that a cell is never cut to ``sweep-…`` for a program or a
    file to read."""
    if "COLUMNS" not in os.environ and not Console().is_terminal:
        return Console(highlight=False, width=PIPED_WIDTH)
    return Console(highlight=False)


def reports_errors(command: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """Wrap a command: a ``CliError`` is printed as one message on stderr and its exit code."""

    @functools.wraps(command)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except CliError as error:
            Console(stderr=True, highlight=False, soft_wrap=True).print(
                f"[bold red]error:[/] {escape(str(error))}"
            )
            return error.code

    return wrapped


def run_url(config: Settings, run_id: str) -> str:
    """The dashboard page of a run."""
    return f"{config.url}/runs/{run_id}/"
