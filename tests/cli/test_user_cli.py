"""``simrun user NAME --revoke``: every way in ends (tokens, password, browser sessions), the
command says so and how to restore it, and ``simrun user NAME`` restores it (issue 45)."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from runs import cli
from runs.cli.user import ensure_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def simrun_home(tmp_path, monkeypatch):
    """The command's home, its environment restored after (``home.prepare`` sets it)."""
    monkeypatch.setenv("SIMRUN_HOME", str(tmp_path))
    monkeypatch.setenv("SECRET_KEY", "a-test-key")
    return tmp_path


def ways_in(password: str, token: str, session: Client) -> list[str]:
    """Which ways in still reach ``/api/me/``: the password, the token, the browser session."""
    found = []
    if Client().login(username="alice", password=password):
        found.append("password")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    if api.get("/api/me/").status_code == 200:
        found.append("token")
    if session.get("/api/me/").status_code == 200:
        found.append("session")
    return found


def test_revoke_ends_every_way_in_says_so_and_simrun_user_restores_it(simrun_home, capsys):
    login = ensure_user(name="alice", password="first-password")
    assert login.token is not None
    session = Client()
    assert session.login(username="alice", password="first-password")
    assert ways_in("first-password", login.token, session) == ["password", "token", "session"]

    assert cli.main(["user", "alice", "--revoke"]) == 0

    said = capsys.readouterr().out.strip()
    assert said == (
        "revoked 1 token(s) of alice; its password no longer works and its browser sessions "
        "are ended. `simrun user alice` gives it a new password and token."
    )
    assert ways_in("first-password", login.token, session) == []

    assert cli.main(["user", "alice"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("password: ") and lines[1].startswith("token: ")
    password, token = lines[0].removeprefix("password: "), lines[1].split()[1]
    assert ways_in(password, token, Client()) == ["password", "token"]
    assert ways_in("first-password", login.token, session) == []


def test_revoking_a_user_that_does_not_exist_says_so_and_fails(simrun_home, capsys):
    assert cli.main(["user", "nobody", "--revoke"]) == 1
    assert capsys.readouterr().out.strip() == "simrun: no user nobody"
