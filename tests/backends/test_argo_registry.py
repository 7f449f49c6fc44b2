"""has_image against a registry on loopback speaking the registry HTTP API v2."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes.client import ApiClient, Configuration

from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.registry import (
    DOCKER_HUB,
    ImageRef,
    has_image,
    image_digest,
    parse_ref,
    registry_credentials,
)
from runs.backends.base import ClusterConfig

USER, PASSWORD = "robot", "s3cret"


class Registry(ThreadingHTTPServer):
    """A registry with some manifests; ``auth`` is none, token or basic."""

    daemon_threads = True

    def __init__(self, auth: str = "none", *, token_needs_login: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _RegistryHandler)
        self.auth = auth
        self.token_needs_login = token_needs_login
        self.manifests: set[tuple[str, str]] = set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.fail_with: int | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _RegistryHandler(BaseHTTPRequestHandler):
    server: Registry

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet."""

    def _reply(self, code: int, body: dict | None = None, headers: dict | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _login_ok(self) -> bool:
        expected = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        return self.headers.get("Authorization") == f"Basic {expected}"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.server.requests.append(("GET", url.path, dict(self.headers)))
        if url.path != "/token":
            self._reply(404)
            return
        if self.server.token_needs_login and not self._login_ok():
            self._reply(401, {"errors": [{"code": "UNAUTHORIZED"}]})
            return
        scope = parse_qs(url.query)["scope"][0]
        self._reply(200, {"token": f"token-for-{scope}"})

    def do_HEAD(self) -> None:
        url = urlsplit(self.path)
        self.server.requests.append(("HEAD", url.path, dict(self.headers)))
        if self.server.fail_with:
            self._reply(self.server.fail_with)
            return
        repository, _, reference = url.path.removeprefix("/v2/").partition("/manifests/")
        if not self._authorized(repository):
            return
        found = (repository, reference) in self.server.manifests
        digest = {"Docker-Content-Digest": "sha256:" + "0" * 64} if found else {}
        self._reply(200 if found else 404, headers=digest)

    def _authorized(self, repository: str) -> bool:
        auth = self.server.auth
        given = self.headers.get("Authorization", "")
        if auth == "token":
            if given == f"Bearer token-for-repository:{repository}:pull":
                return True
            realm = f"http://{self.server.host}/token"
            challenge = (
                f'Bearer realm="{realm}",service="registry.test",'
                f'scope="repository:{repository}:pull"'
            )
            self._reply(401, headers={"WWW-Authenticate": challenge})
            return False
        if auth == "basic" and not self._login_ok():
            self._reply(401, headers={"WWW-Authenticate": 'Basic realm="registry"'})
            return False
        return True


@pytest.fixture
def registry(request: pytest.FixtureRequest) -> Iterator[Registry]:
    auth, needs_login = getattr(request, "param", ("none", False))
    server = Registry(auth, token_needs_login=needs_login)
    server.manifests.add(("simrun-env", "abc"))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def docker_config(tmp_path: Path, host: str) -> Path:
    path = tmp_path / "config.json"
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    path.write_text(json.dumps({"auths": {host: {"auth": login}}}))
    return path


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("python:3.12-slim", ImageRef(DOCKER_HUB, "library/python", "3.12-slim")),
        ("ghcr.io/simrun/harness:0.1.0", ImageRef("ghcr.io", "simrun/harness", "0.1.0")),
        ("localhost:5000/env:abc", ImageRef("localhost:5000", "env", "abc")),
        ("127.0.0.1:5000/team/env", ImageRef("127.0.0.1:5000", "team/env", "latest")),
        ("me/tool", ImageRef(DOCKER_HUB, "me/tool", "latest")),
        (
            "registry.example/a/b:1@sha256:" + "f" * 64,
            ImageRef("registry.example", "a/b", "sha256:" + "f" * 64),
        ),
    ],
)
def test_an_image_reference_names_its_registry_repository_and_tag_or_digest(
    ref: str, expected: ImageRef
) -> None:
    assert parse_ref(ref) == expected


def test_an_open_registry_is_asked_for_the_manifest_of_the_image(registry: Registry) -> None:
    assert has_image(f"{registry.host}/simrun-env:abc") is True
    assert has_image(f"{registry.host}/simrun-env:other") is False
    method, path, headers = registry.requests[0]
    assert (method, path) == ("HEAD", "/v2/simrun-env/manifests/abc")
    assert "application/vnd.oci.image.index.v1+json" in headers["Accept"]
    assert "application/vnd.docker.distribution.manifest.v2+json" in headers["Accept"]


@pytest.mark.parametrize("registry", [("token", False)], indirect=True)
def test_a_token_registry_gives_an_anonymous_token_for_pulling(registry: Registry) -> None:
    assert has_image(f"{registry.host}/simrun-env:abc") is True
    assert has_image(f"{registry.host}/simrun-env:gone") is False
    assert [r[:2] for r in registry.requests[:3]] == [
        ("HEAD", "/v2/simrun-env/manifests/abc"),
        ("GET", "/token"),
        ("HEAD", "/v2/simrun-env/manifests/abc"),
    ]


@pytest.mark.parametrize("registry", [("token", True)], indirect=True)
def test_a_token_service_that_needs_a_login_gets_the_credentials_of_the_config(
    registry: Registry, tmp_path: Path
) -> None:
    credentials = registry_credentials(docker_config(tmp_path, registry.host))

    assert has_image(f"{registry.host}/simrun-env:abc", credentials=credentials) is True
    with pytest.raises(RuntimeError, match="token service"):
        has_image(f"{registry.host}/simrun-env:abc")


@pytest.mark.parametrize("registry", [("basic", False)], indirect=True)
def test_a_registry_with_basic_authentication_gets_the_credentials_of_the_config(
    registry: Registry, tmp_path: Path
) -> None:
    credentials = registry_credentials(docker_config(tmp_path, registry.host))

    assert has_image(f"{registry.host}/simrun-env:abc", credentials=credentials) is True
    assert has_image(f"{registry.host}/simrun-env:x", credentials=credentials) is False
    with pytest.raises(RuntimeError, match="needs credentials"):
        has_image(f"{registry.host}/simrun-env:abc")


def test_a_registry_that_cannot_answer_is_an_error_not_a_missing_image(
    registry: Registry,
) -> None:
    registry.fail_with = 503

    with pytest.raises(RuntimeError, match="503"):
        has_image(f"{registry.host}/simrun-env:abc")


@pytest.mark.parametrize("registry", [("basic", False)], indirect=True)
def test_the_backend_asks_with_the_credentials_file_of_the_cluster(
    registry: Registry, tmp_path: Path
) -> None:
    cluster = ClusterConfig(registry_auth_file=str(docker_config(tmp_path, registry.host)))
    backend = ArgoBackend(
        cluster=cluster, api=ApiClient(Configuration(host="http://127.0.0.1:9")), store=tmp_path
    )

    assert backend.has_image(f"{registry.host}/simrun-env:abc") is True


def test_credentials_are_read_from_auth_or_user_and_password_docker_hub_by_its_keys(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hub:pw").decode()},
                    "registry.example:5000": {"username": "u", "password": "p:with:colons"},
                }
            }
        )
    )

    assert registry_credentials(path) == {
        DOCKER_HUB: ("hub", "pw"),
        "registry.example:5000": ("u", "p:with:colons"),
    }


@pytest.mark.parametrize("registry", [("token", False)], indirect=True)
def test_the_digest_of_an_image_is_the_registrys_answer_to_the_same_head(
    registry: Registry,
) -> None:
    assert image_digest(f"{registry.host}/simrun-env:abc") == "sha256:" + "0" * 64
    assert image_digest(f"{registry.host}/simrun-env:gone") is None
    registry.fail_with = 503
    with pytest.raises(RuntimeError, match="503"):
        image_digest(f"{registry.host}/simrun-env:abc")
