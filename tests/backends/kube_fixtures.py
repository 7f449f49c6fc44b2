"""The Kubernetes stand-in of the Argo tests (tests/backends, tests/chaos): a pytest plugin,
loaded by tests/conftest.py with the service's fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runs.backends.argo.backend import ArgoBackend
from tests.backends.kube_api import KubeApiServer, Request
from tests.polling import wait_for


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    """A local HTTP server that speaks the Kubernetes API, for the real kubernetes client."""
    with KubeApiServer() as server:
        yield server


@pytest.fixture(autouse=True)
def argo_backends_closed(monkeypatch) -> Iterator[None]:
    """Every Argo backend a test made is closed after it: its watch threads end, instead of
    calling a Kubernetes API that is gone for the rest of the session."""
    made: list[ArgoBackend] = []
    init = ArgoBackend.__init__

    def recorded(self: ArgoBackend, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(ArgoBackend, "__init__", recorded)
    yield
    for backend in made:
        backend.close()


def pods_seen(backend: ArgoBackend, kube: KubeApiServer, timeout_s: float = 10.0) -> None:
    """Wait until the backend's pod cache heard every write of a pod the stand-in holds: it
    follows them by a watch, as late as a real informer, and a test that wrote a pod reads
    it back only once it did."""
    version = kube.state.pods_version
    backend.pods.pods()  # started, and listed
    wait_for(lambda: int(backend.pods.version or 0) >= version, timeout_s, "the pod cache")


def asked(kube: KubeApiServer) -> list[Request]:
    """The requests served but the watches' (each one a stream, started once in a while by a
    cache's own thread, not by the pass or the page a test measures)."""
    return [r for r in kube.state.requests if r.query.get("watch") != "true"]
