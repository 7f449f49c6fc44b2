"""Where the server is and the token: given, from the environment, or as ``simrun login`` saved
(``obtain_token`` asks the server for one with a username and password).

``simrun login`` keeps both in ``$XDG_CONFIG_HOME/simrun/config.json`` (by default
``~/.config/simrun/config.json``), readable by the user only; ``SIMRUN_URL`` and
``SIMRUN_TOKEN`` take precedence over it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.files import write_atomic
from runs.client.errors import AuthError, NotConfigured, ServerError, Throttled, Unavailable

TIMEOUT_S = 30.0
"""Seconds a request waits for the server's answer."""


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
    """Save the server and token, readable by the user only (written aside, then renamed)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, json.dumps({"url": url, "token": token}, indent=2), mode=0o600)


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def settings(url: str | None = None, token: str | None = None) -> Settings:
    """The server and token: as given, else the environment's, else the saved ones.

    A token is looked up only for the server it belongs to: given a URL other than the one
    configured, the configured token is not sent to it.
    """
    saved = read_config()
    configured_url = os.environ.get("SIMRUN_URL") or saved.get("url", "")
    configured_token = os.environ.get("SIMRUN_TOKEN") or saved.get("token", "")
    if url and url.rstrip("/") != configured_url.rstrip("/"):
        configured_token = ""
    url = url or configured_url
    token = token or configured_token
    if not url:
        raise NotConfigured(
            "no simrun server configured: run `simrun login URL` or set SIMRUN_URL "
            "(e.g. http://127.0.0.1:8000)"
        )
    if not token:
        raise NotConfigured(f"not logged in to {url}: run `simrun login` or set SIMRUN_TOKEN")
    return Settings(url.rstrip("/"), token)


def obtain_token(url: str, username: str, password: str, *, timeout: float = TIMEOUT_S) -> str:
    """The API token of a user, from their username and password (a new one at each call)."""
    url = url.rstrip("/")
    try:
        response = httpx.post(
            f"{url}/api/token/",
            data={"username": username, "password": password},
            timeout=timeout,
        )
    except httpx.HTTPError as error:
        raise Unavailable(f"cannot reach the simrun server at {url}: {error}") from None
    if response.status_code == 400:
        raise AuthError("the username or password is wrong")
    if response.status_code == 429:
        wait = response.headers.get("Retry-After", "?")
        raise Throttled(f"too many failed logins: try again in {wait} s", wait)
    if response.status_code != 200:
        raise ServerError(f"the server at {url} answered {response.status_code} to a login")
    return str(response.json()["token"])
