"""The fixtures of every tier but the harness's (a pytest plugin, loaded by tests/conftest.py
with pytest-django): a store of its own per test, the personas and their API clients, the
service's fake backend, and the Celery hand-offs recorded instead of sent."""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from runs import tasks
from runs.backends import get_backend
from runs.backends.fake import FakeBackend
from tests import factories
from tests.backends.packages import pip_index


@pytest.fixture(autouse=True)
def store(settings, tmp_path: Path) -> Path:
    """Every test gets a store of its own."""
    settings.SIMRUN_STORE = tmp_path / "store"
    settings.SIMRUN_STORE.mkdir()
    return settings.SIMRUN_STORE


@pytest.fixture
def owner(db) -> User:
    return factories.alice()


@pytest.fixture
def stranger(db) -> User:
    return factories.mallory()


@pytest.fixture
def staff(db) -> User:
    return factories.operator()


@pytest.fixture
def owner_client(owner) -> APIClient:
    return factories.client_for(owner)


@pytest.fixture
def stranger_client(stranger) -> APIClient:
    return factories.client_for(stranger)


@pytest.fixture
def staff_client(staff) -> APIClient:
    return factories.client_for(staff)


@pytest.fixture
def anonymous_client() -> APIClient:
    return APIClient()


@pytest.fixture
def index(tmp_path: Path, monkeypatch) -> Path:
    """A folder that is pip's only index (``tests/backends/packages.py``), ``pkgdemo`` in it."""
    return pip_index(tmp_path / "index", monkeypatch)


@pytest.fixture
def team_folder(monkeypatch) -> Iterator[Path]:
    """A folder every task user may cross, with a Python they may run (``task_user_venv``:
    this venv's is below /root), which the service's builds and learnings use as its own."""
    from tests.e2e.service import task_user_venv

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    task_user_venv(base)
    monkeypatch.setattr(sys, "executable", str(base / "venv" / "bin" / "python"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    """The service's backend, a fake of its own for this test."""
    get_backend.cache_clear()
    fake = get_backend()
    assert isinstance(fake, FakeBackend)
    yield fake
    get_backend.cache_clear()


@pytest.fixture
def queued(monkeypatch) -> list[str]:
    """The runs handed to the submission task (the Celery task itself is the controller's)."""
    handed: list[str] = []
    monkeypatch.setattr(tasks.submit_run, "delay", handed.append)
    return handed


@pytest.fixture
def learning(monkeypatch) -> list[str]:
    """The runs handed to the learner (the Celery task itself is ``learning.learn``)."""
    handed: list[str] = []
    monkeypatch.setattr(tasks.learn_run, "delay", handed.append)
    return handed


@pytest.fixture
def learner(learning, monkeypatch) -> Iterator[None]:
    """The runs handed to the learner learned in a thread of their own, as its worker does
    (``learning.learn``), while the submission's client waits for them (a live server)."""
    from django.db import connection

    from runs.control import learning as learner_task

    threads: list[threading.Thread] = []

    def learn(run_id: str) -> None:
        try:
            learner_task.learn(run_id)
        finally:
            connection.close()

    def hand_on(run_id: str) -> None:
        threads.append(threading.Thread(target=learn, args=(run_id,), daemon=True))
        threads[-1].start()

    monkeypatch.setattr(tasks.learn_run, "delay", hand_on)
    yield
    for thread in threads:
        thread.join(timeout=600)


@pytest.fixture
def settled(monkeypatch) -> list[str | None]:
    """The runs handed to the settle task."""
    handed: list[str | None] = []
    monkeypatch.setattr(tasks.settle, "delay", handed.append)
    return handed
