"""Whether a registry has an image, and its digest: a ``HEAD`` of its manifest over the
registry HTTP API v2.

A registry that answers 401 names in ``WWW-Authenticate`` how to authenticate: a bearer token
from its token service (anonymous, or with the credentials of a Docker ``config.json``), or
basic authentication. Loopback registries are spoken to over plain HTTP, every other over HTTPS.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
DOCKER_HUB = "registry-1.docker.io"
DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", DOCKER_HUB)
LOOPBACK = re.compile(r"^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$")
CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')

Credentials = Mapping[str, tuple[str, str]]
"""Registry host -> (user, password)."""


@dataclass(frozen=True)
class ImageRef:
    """An image reference split the way the registry API needs it."""

    host: str
    repository: str
    reference: str
    """A tag or a digest."""


def parse_ref(ref: str) -> ImageRef:
    """Split ``[host[:port]/]repository[:tag][@digest]``; Docker Hub when no host is named."""
    name, _, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = DOCKER_HUB, name
    tag = ""
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
    if host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not path:
        raise ValueError(f"{ref!r} is no image reference")
    return ImageRef(host=host, repository=path, reference=digest or tag or "latest")


def registry_credentials(path: str | Path) -> dict[str, tuple[str, str]]:
    """The credentials of a Docker ``config.json`` (``auths``) by registry host."""
    data = json.loads(Path(path).read_text())
    found: dict[str, tuple[str, str]] = {}
    for key, entry in (data.get("auths") or {}).items():
        if entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        else:
            user, password = entry.get("username", ""), entry.get("password", "")
        host = key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]
        found[DOCKER_HUB if key in DOCKER_HUB_KEYS else host] = (user, password)
    return found


def _base_url(host: str) -> str:
    return f"{'http' if LOOPBACK.match(host) else 'https'}://{host}"


def _authorization(
    http: httpx.Client, challenge: str, image: ImageRef, credentials: Credentials
) -> dict[str, str]:
    """The Authorization header a 401's challenge asks for."""
    scheme, _, params = challenge.partition(" ")
    login = credentials.get(image.host)
    if scheme.lower() == "basic":
        if login is None:
            raise RuntimeError(f"registry {image.host} needs credentials and has none")
        return {"Authorization": "Basic " + base64.b64encode(":".join(login).encode()).decode()}
    if scheme.lower() != "bearer":
        raise RuntimeError(f"registry {image.host} asks for unknown authentication {scheme!r}")
    fields = dict(CHALLENGE_PARAM.findall(params))
    if "realm" not in fields:
        raise RuntimeError(f"registry {image.host} names no token realm: {challenge!r}")
    query = {"scope": fields.get("scope", f"repository:{image.repository}:pull")}
    if "service" in fields:
        query["service"] = fields["service"]
    response = http.get(fields["realm"], params=query, auth=login)
    if response.status_code != 200:
        raise RuntimeError(
            f"the token service of registry {image.host} answered {response.status_code}"
        )
    body = response.json()
    token = body.get("token") or body.get("access_token")
    if not token:
        raise RuntimeError(f"the token service of registry {image.host} gave no token")
    return {"Authorization": f"Bearer {token}"}


def has_image(ref: str, *, credentials: Credentials | None = None, timeout_s: float = 15) -> bool:
    """Whether the registry has the manifest of ``ref``; RuntimeError when it cannot say."""
    return _manifest(ref, credentials, timeout_s) is not None


def image_digest(
    ref: str, *, credentials: Credentials | None = None, timeout_s: float = 15
) -> str | None:
    """The digest (``sha256:…``) the registry has for ``ref``, from the same ``HEAD`` of its
    manifest; None when it has no such image; RuntimeError when it cannot say."""
    headers = _manifest(ref, credentials, timeout_s)
    if headers is None:
        return None
    digest = headers.get("docker-content-digest", "")
    if not digest.startswith("sha256:"):
        raise RuntimeError(f"registry {parse_ref(ref).host} gave no digest for {ref}")
    return str(digest)


def _manifest(ref: str, credentials: Credentials | None, timeout_s: float) -> httpx.Headers | None:
    """The headers of the registry's answer to a ``HEAD`` of the manifest of ``ref``; None
    when it has none; RuntimeError when it cannot say."""
    image = parse_ref(ref)
    url = f"{_base_url(image.host)}/v2/{image.repository}/manifests/{image.reference}"
    headers = {"Accept": MANIFEST_TYPES}
    with httpx.Client(timeout=timeout_s) as http:
        response = http.head(url, headers=headers)
        if response.status_code == 401:
            challenge = response.headers.get("www-authenticate", "")
            headers |= _authorization(http, challenge, image, credentials or {})
            response = http.head(url, headers=headers)
    if response.status_code == 200:
        return response.headers
    if response.status_code == 404:
        return None
    raise RuntimeError(f"registry {image.host} answered {response.status_code} for {ref}")
