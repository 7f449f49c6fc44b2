"""The edge of the service (runs/web/middleware.py): bodies past their cap are refused before they
are read, and a full disk is answered as such, in JSON for the API, logged once a minute."""

from __future__ import annotations

import errno
import io
import json
import logging
import sys

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.test import Client

from runs.common import store
from runs.common.tokens import create_token
from runs.models import Run
from runs.web import middleware

SPEC = b"tasks: {s: {type: squares, settings: {n: 2}}}\n"


class Body(io.RawIOBase):
    """A request body of ``size`` bytes that counts what the server read of it."""

    def __init__(self, size: int, data: bytes = b"") -> None:
        self.size = size
        self.data = data
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        left = self.size - self.read_bytes
        size = left if size is None or size < 0 else min(size, left)
        start = self.read_bytes
        self.read_bytes += size
        piece = self.data[start : start + size]
        return piece + b"x" * (size - len(piece))

    def readline(self, size: int = -1) -> bytes:
        return self.read(size)


def served(method: str, path: str, body: Body, **headers: str) -> tuple[str, dict, bytes]:
    """Status, headers and body of a request, as a WSGI server hands it to Django."""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": "127.0.0.1:8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        **{name.upper(): value for name, value in headers.items()},
    }
    started: list[tuple[str, list[tuple[str, str]]]] = []
    answer = WSGIHandler()(
        environ, lambda status, headers, info=None: started.append((status, headers))
    )
    try:
        return started[0][0], dict(started[0][1]), b"".join(answer)
    finally:
        answer.close()


MIB = 1024 * 1024


@pytest.mark.django_db
def test_a_64_mib_body_is_refused_with_413_before_a_byte_of_it_is_read():
    body = Body(64 * MIB)
    status, headers, content = served(
        "POST", "/api/runs/", body, CONTENT_LENGTH=str(64 * MIB), CONTENT_TYPE="application/yaml"
    )
    assert status.startswith("413")
    assert headers["Content-Type"] == "application/json"
    assert b"larger than 1048576 bytes" in content
    assert body.read_bytes == 0


@pytest.mark.django_db
def test_a_large_form_to_the_dashboard_gets_a_short_413_page_unread():
    body = Body(64 * MIB)
    status, headers, content = served(
        "POST", "/login/", body, CONTENT_LENGTH=str(64 * MIB), CONTENT_TYPE="text/plain"
    )
    assert status.startswith("413") and headers["Content-Type"].startswith("text/html")
    assert b"larger than" in content and body.read_bytes == 0


@pytest.mark.django_db
def test_snapshot_uploads_keep_their_own_larger_cap():
    assert middleware.body_cap("/api/snapshots/") == 100 * MIB
    body = Body(101 * MIB)
    status, _, _ = served(
        "POST",
        "/api/snapshots/",
        body,
        CONTENT_LENGTH=str(101 * MIB),
        CONTENT_TYPE="application/gzip",
    )
    assert status.startswith("413") and body.read_bytes == 0


@pytest.mark.django_db
def test_a_chunked_body_past_the_cap_gets_413_once_the_cap_is_passed():
    body = Body(64 * MIB)
    status, _, content = served(
        "POST",
        "/api/runs/",
        body,
        HTTP_TRANSFER_ENCODING="chunked",
        CONTENT_TYPE="application/yaml",
    )
    assert status.startswith("413") and b"larger than" in content
    assert body.read_bytes == MIB + 1


@pytest.mark.django_db(transaction=True)  # served as a server serves it, as test_health_check
def test_a_chunked_body_within_the_cap_is_received_whole(owner):
    token = create_token(owner)[1]
    body = Body(len(SPEC), SPEC)
    status, _, content = served(
        "POST",
        "/api/runs/",
        body,
        HTTP_TRANSFER_ENCODING="chunked",
        HTTP_AUTHORIZATION=f"Token {token}",
        CONTENT_TYPE="application/yaml",
    )
    assert status.startswith("201"), content
    assert Run.objects.get().owner == owner


def test_request_data_too_big_is_a_json_413_for_the_api_without_an_error_logged(
    owner_client, settings, caplog
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    response = owner_client.post(
        "/api/token/", data={"username": "alice", "password": "x" * 100}, format="multipart"
    )
    assert response.status_code == 413
    assert "larger than" in response.json()["detail"]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


@pytest.fixture
def disk_full(monkeypatch):
    """Every write of the store fails as on a full disk."""

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(store, "write_json", full)
    monkeypatch.setattr(middleware.StorageFullMiddleware, "logged_at", None, raising=False)


def test_a_full_disk_is_a_json_507_naming_it_and_logged_once_for_50_submissions(
    owner_client, disk_full, caplog
):
    caplog.set_level(logging.INFO)
    for _ in range(50):
        response = owner_client.post("/api/runs/", data=SPEC, content_type="application/yaml")
        assert response.status_code == 507
        assert "No space left on device" in response.json()["detail"]
    lines = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(lines) == 1, [record.getMessage() for record in lines]
    assert lines[0].exc_info is None
    assert not Run.objects.exists()


def test_a_full_disk_is_logged_again_after_a_minute(owner_client, disk_full, caplog, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(middleware.time, "monotonic", lambda: now[0])
    for _ in range(3):
        owner_client.post("/api/runs/", data=SPEC, content_type="application/yaml")
        now[0] += 30
    errors = [record for record in caplog.records if record.name == "runs.web.middleware"]
    assert len(errors) == 2


def test_a_full_disk_is_a_short_507_page_on_the_dashboard(owner, disk_full):
    client = Client()
    client.force_login(owner)
    response = client.post("/runs/new/", {"spec": SPEC.decode()})
    assert response.status_code == 507
    assert b"No space left on device" in response.content


@pytest.mark.django_db
def test_every_operation_taking_a_body_documents_the_413_its_paths_cap_answers(anonymous_client):
    """The schema says where a 413 can come from (a body past its path's cap), so a client
    and the schema's fuzz expect it there; each such operation's real 413 is as documented."""
    schema = anonymous_client.get("/api/schema/?format=json").json()
    taking = [
        (method, path, operation)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    ]
    assert {(m, p) for m, p, _ in taking} >= {("post", "/api/runs/"), ("post", "/api/snapshots/")}
    for method, path, operation in taking:
        cap = middleware.body_cap(path)
        documented = operation["responses"].get("413")
        assert documented is not None, (method, path)
        assert f"{cap:,} bytes" in documented["description"], (method, path)
        content = documented["content"]["application/json"]["schema"]
        assert content == {"$ref": "#/components/schemas/Error"}
        filled = path.replace("{id}", "abc")
        media = next(iter(operation["requestBody"]["content"]))
        status, headers, answer = served(
            method.upper(), filled, Body(cap + 1), CONTENT_LENGTH=str(cap + 1), CONTENT_TYPE=media
        )
        assert status.startswith("413") and headers["Content-Type"] == "application/json"
        assert set(json.loads(answer)) == {"detail"}
