"""Fixtures shared by the whole suite: personas, API clients, a store of its own per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.backends.kube_api import KubeApiServer
from tests.backends.packages import pip_index


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    """A local HTTP server that speaks the Kubernetes API, for the real kubernetes client."""
    with KubeApiServer() as server:
        yield server


@pytest.fixture(autouse=True)
def argo_backends_closed(monkeypatch) -> Iterator[None]:
    """Every Argo backend a test made is closed after it: its watch threads end, instead of
    calling a Kubernetes API that is gone for the rest of the session."""
    from runs.backends.argo.backend import ArgoBackend

    made: list[ArgoBackend] = []
    init = ArgoBackend.__init__

    def recorded(self: ArgoBackend, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(ArgoBackend, "__init__", recorded)
    yield
    for backend in made:
        backend.close()


@pytest.fixture(autouse=True)
def store(settings, tmp_path: Path) -> Path:
    """Every test gets a store of its own."""
    settings.SIMRUN_STORE = tmp_path / "store"
    settings.SIMRUN_STORE.mkdir()
    return settings.SIMRUN_STORE


@pytest.fixture
def owner(db) -> User:
    return User.objects.create_user("alice", password="alice-password")


@pytest.fixture
def stranger(db) -> User:
    return User.objects.create_user("mallory", password="mallory-password")


@pytest.fixture
def staff(db) -> User:
    return User.objects.create_user("operator", password="operator-password", is_staff=True)


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def owner_client(owner) -> APIClient:
    return client_for(owner)


@pytest.fixture
def stranger_client(stranger) -> APIClient:
    return client_for(stranger)


@pytest.fixture
def staff_client(staff) -> APIClient:
    return client_for(staff)


@pytest.fixture
def anonymous_client() -> APIClient:
    return APIClient()


@pytest.fixture
def index(tmp_path: Path, monkeypatch) -> Path:
    """A folder that is pip's only index (``tests/backends/packages.py``), ``pkgdemo`` in it."""
    return pip_index(tmp_path / "index", monkeypatch)
