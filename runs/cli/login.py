"""``simrun login [URL]``: get an API token and keep the server and token for later commands.

With ``--token`` the token is checked and kept; otherwise the username and password are asked
for (the password never on the command line: ``--password-stdin`` reads it from a pipe).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from rich.console import Console

from runs.cli.client_commands import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Client,
    CliError,
    as_cli_errors,
    reports_errors,
)
from runs.client import config
from runs.client.config import Settings, read_config, write_config

NAME = "login"
HELP = "log in to a simrun server and keep its URL and your API token"
DEFAULT_URL = "http://127.0.0.1:8000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url", nargs="?", help=f"the server (default: SIMRUN_URL, the saved one, {DEFAULT_URL})"
    )
    parser.add_argument("-u", "--username", help="your username (asked when missing)")
    parser.add_argument("--token", help="an API token to keep instead of logging in")
    parser.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )


def obtain_token(url: str, username: str, password: str) -> str:
    """The API token of a user, from their username and password."""
    with as_cli_errors():
        return config.obtain_token(url, username, password)


NO_TERMINAL = (
    "no terminal to ask for the {what}: pass -u NAME with the password on standard input "
    "(--password-stdin), or --token TOKEN"
)


def credentials(args: argparse.Namespace) -> tuple[str, str]:
    """The username and password: from the arguments, standard input or the terminal."""
    username = args.username
    if not username:
        if not sys.stdin.isatty():
            raise CliError(NO_TERMINAL.format(what="username"), EXIT_BAD_INPUT)
        username = input("username: ")
    if args.password_stdin:
        return username, sys.stdin.readline().rstrip("\n")
    if not has_terminal():
        raise CliError(NO_TERMINAL.format(what="password"), EXIT_BAD_INPUT)
    return username, getpass.getpass("password: ")


def has_terminal() -> bool:
    """Whether getpass can ask: it reads the controlling terminal, not standard input."""
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        return False
    return True


@reports_errors
def run(args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True)
    url = (
        args.url or os.environ.get("SIMRUN_URL") or read_config().get("url") or DEFAULT_URL
    ).rstrip("/")
    token = args.token or obtain_token(url, *credentials(args))
    with Client(Settings(url, token)) as client:
        me = client.get("/api/me/")
    path = write_config(url, token)
    console.print(f"logged in to {url} as {me['username']}; saved in {path}")
    return EXIT_OK
