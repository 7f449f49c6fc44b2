"""A kept database connection is checked by a request's own first statement, not by a
``SELECT 1`` before it, and one lost between requests is replaced without an error
(``runs.common.prepared.prepared_rows``). Requests go through Django's WSGI handler as a server
calls it, so its signals reset the check at each request as they do when served."""

from __future__ import annotations

import io
import json
import sys

import psycopg
import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.core.handlers.wsgi import WSGIHandler
from django.db import DatabaseError, connection, transaction
from django.db.backends.postgresql.base import DatabaseWrapper

from runs.common import prepared
from runs.common.tokens import create_token
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def served(path: str, **headers: str) -> tuple[str, bytes]:
    """The status and body of a GET of ``path``, as a WSGI server asks Django for it."""
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": "127.0.0.1:8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr,
        **{f"HTTP_{name.upper()}": value for name, value in headers.items()},
    }
    statuses: list[str] = []
    answer = WSGIHandler()(environ, lambda status, headers, info=None: statuses.append(status))
    try:
        return statuses[0], b"".join(answer)
    finally:
        answer.close()  # the end of the request: Django's request_finished


@pytest.fixture
def token(owner) -> str:
    Run.objects.create(owner=owner, name="kept", spec={}, backend="fake")
    return create_token(owner)[1]


@pytest.fixture
def cookie(owner) -> str:
    session = SessionStore()
    session[SESSION_KEY] = str(owner.pk)
    session[BACKEND_SESSION_KEY] = "runs.common.user_backend.UserBackend"
    session[HASH_SESSION_KEY] = owner.get_session_auth_hash()
    session.create()
    return f"sessionid={session.session_key}"


@pytest.fixture
def checks(monkeypatch) -> list[int]:
    """The health checks Django ran (``SELECT 1``), by the backend they ran on."""
    ran: list[int] = []
    usable = DatabaseWrapper.is_usable

    def counted(self: DatabaseWrapper) -> bool:
        ran.append(self.connection.info.backend_pid)
        return usable(self)

    monkeypatch.setattr(DatabaseWrapper, "is_usable", counted)
    return ran


def backend_pid() -> int:
    connection.ensure_connection()
    return connection.connection.info.backend_pid


def lose_the_connection() -> None:
    """End this connection's server process, as a restart of PostgreSQL does."""
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        dbname=settings["NAME"],
        autocommit=True,
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [backend_pid()])


def test_requests_on_a_kept_connection_send_no_select_1_before_their_statements(token, checks):
    connection.close()  # a new one, far from its CONN_MAX_AGE
    kept = backend_pid()
    for _ in range(3):
        status, body = served("/api/runs/", authorization=f"Token {token}")
        assert status == "200 OK", body[:300]
        assert [run["name"] for run in json.loads(body)["results"]] == ["kept"]
    assert checks == []
    assert backend_pid() == kept  # the connection was kept, so its check was due each time


@pytest.mark.parametrize("page", ["/api/runs/", "/api/me/"])
def test_a_connection_lost_between_api_requests_is_replaced_without_an_error(token, page):
    assert served(page, authorization=f"Token {token}")[0] == "200 OK"
    lost = backend_pid()
    lose_the_connection()
    status, body = served(page, authorization=f"Token {token}")
    assert status == "200 OK", body[:300]
    assert backend_pid() != lost


def test_a_connection_lost_between_dashboard_requests_is_replaced_without_an_error(cookie):
    assert served("/", cookie=cookie)[0] == "200 OK"
    lost = backend_pid()
    lose_the_connection()
    status, body = served("/", cookie=cookie)
    assert status == "200 OK", body[:300]
    assert backend_pid() != lost


def test_a_failing_statement_on_a_sound_connection_is_raised_and_run_once(monkeypatch):
    connection.close()  # a new one, far from its CONN_MAX_AGE
    backend_pid()
    connection.close_if_unusable_or_obsolete()  # a new request: its check is due
    runs: list[str] = []
    run = prepared._rows

    def counted(*args):
        runs.append(args[1])
        return run(*args)

    monkeypatch.setattr(prepared, "_rows", counted)
    with pytest.raises(DatabaseError):
        prepared.prepared_rows(connection, "SELECT 1 / 0", [])
    assert runs == ["SELECT 1 / 0"]


def test_inside_a_transaction_djangos_own_check_is_kept(checks):
    connection.close()  # a new one: one older than CONN_MAX_AGE is closed below, unchecked
    kept = backend_pid()
    connection.close_if_unusable_or_obsolete()
    with transaction.atomic():
        assert prepared.prepared_rows(connection, "SELECT %s::int", [7]) == [(7,)]
    assert checks == [kept]


def test_a_lost_connection_inside_a_transaction_is_an_error_not_a_silent_new_one(owner):
    backend_pid()
    with pytest.raises(DatabaseError), transaction.atomic():
        User.objects.filter(pk=owner.pk).update(first_name="changed")
        lose_the_connection()
        prepared.prepared_rows(connection, "SELECT 1", [])
