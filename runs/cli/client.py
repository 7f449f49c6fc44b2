"""The REST API as the client commands use it: where the server is, the token, clear errors.

The server and token come from ``SIMRUN_URL`` and ``SIMRUN_TOKEN``, else from the file
``simrun login`` writes (``$XDG_CONFIG_HOME/simrun/config.json``). Every failure a user can
meet (no server, a refused token, a bad spec, an unknown run) is a ``CliError`` whose message
says what happened and what to do; no traceback. Never imports Django.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape

EXIT_OK = 0
EXIT_RUN_FAILED = 1
"""The run failed or was cancelled, or the server refused the action (e.g. cancel an ended run)."""
EXIT_BAD_INPUT = 2
"""A bad specification, a missing file, bad arguments."""
EXIT_UNAVAILABLE = 3
"""No server, a refused token, a server error."""

TIMEOUT_S = 30.0


class CliError(Exception):
    """A failure to report in one message, with the exit code of the command."""

    def __init__(self, message: str, code: int = EXIT_UNAVAILABLE, problems: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.problems = problems
        """A 400's problems by field path, one per line."""


def config_path() -> Path:
    """Where ``simrun login`` keeps the server and the token."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "simrun" / "config.json"


def read_config() -> dict[str, str]:
    """The saved configuration; empty without one (a damaged file counts as none)."""
    try:
        data = json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def write_config(url: str, token: str) -> Path:
    """Save the server and token, readable by the user only."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(handle, "w") as file:
        json.dump({"url": url, "token": token}, file, indent=2)
    os.replace(temporary, path)
    return path


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def settings() -> Settings:
    """The server and token: the environment first, then the saved configuration."""
    saved = read_config()
    url = os.environ.get("SIMRUN_URL") or saved.get("url", "")
    token = os.environ.get("SIMRUN_TOKEN") or saved.get("token", "")
    if not url:
        raise CliError(
            "no simrun server configured: run `simrun login URL` or set SIMRUN_URL "
            "(e.g. http://127.0.0.1:8000)"
        )
    if not token:
        raise CliError(f"not logged in to {url}: run `simrun login` or set SIMRUN_TOKEN")
    return Settings(url.rstrip("/"), token)


def field_errors(body: Any) -> str:
    """A 400's problems, one per line, by the path of their field."""
    if isinstance(body, Mapping):
        lines = []
        for path, problems in body.items():
            text = " ".join(problems) if isinstance(problems, list) else str(problems)
            lines.append(f"  {path}: {text}")
        return "\n".join(lines)
    return f"  {body}"


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase
    if isinstance(body, Mapping) and "detail" in body:
        return str(body["detail"])
    return field_errors(body)


class Client:
    """Calls of the REST API with the user's token; failures become ``CliError``."""

    def __init__(self, config: Settings | None = None, *, timeout: float = TIMEOUT_S) -> None:
        self.config = config or settings()
        self.http = httpx.Client(
            base_url=self.config.url,
            headers={
                "Authorization": f"Token {self.config.token}",
                "Accept": "application/json",
            },
            timeout=timeout,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, missing: str = "", **kwargs: Any
    ) -> httpx.Response:
        """Send a request; raise ``CliError`` for no answer or an answer that is no success.

        ``missing`` is the message of a 404: what was not found, by its id.
        """
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise CliError(
                f"the simrun server at {self.config.url} did not answer in time"
            ) from None
        except httpx.HTTPError as error:
            raise CliError(
                f"cannot reach the simrun server at {self.config.url}: {error}. "
                "Is it running (`simrun serve`)? Check SIMRUN_URL or `simrun login`."
            ) from None
        if response.status_code == 401:
            raise CliError(
                f"the server at {self.config.url} refused the token ({_detail(response)}): "
                "run `simrun login` or set SIMRUN_TOKEN"
            )
        if response.status_code == 403:
            raise CliError(f"not allowed: {_detail(response)}", EXIT_RUN_FAILED)
        if response.status_code == 404:
            raise CliError(missing or f"not found: {_detail(response)}", EXIT_BAD_INPUT)
        if response.status_code == 400:
            problems = _detail(response)
            raise CliError(f"refused:\n{problems}", EXIT_BAD_INPUT, problems=problems)
        if response.status_code == 409:
            raise CliError(_detail(response), EXIT_RUN_FAILED)
        if response.status_code >= 400:
            raise CliError(f"the server failed ({response.status_code}): {_detail(response)}"[:500])
        return response

    def get(self, path: str, *, missing: str = "", **params: Any) -> Any:
        return self.request("GET", path, missing=missing, params=params).json()

    def post(self, path: str, *, missing: str = "", **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, missing=missing, **kwargs)


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


def no_run(run_id: str) -> str:
    """The message for a run the server does not know or does not show this user."""
    return f"not found: no run {run_id!r} among the runs you may see"


def run_url(config: Settings, run_id: str) -> str:
    """The dashboard page of a run."""
    return f"{config.url}/runs/{run_id}/"
