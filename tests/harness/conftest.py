"""Fixtures of the harness tests: a store folder, the ``SIMRUN_*`` environment, logs.

Helpers live in ``task_dirs.py`` and ``processes.py``; this tier needs only pytest and the
harness (``pip install -e .``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.execute import THREAD_VARIABLES
from harness.report import HARNESS_STARTED
from harness.sources import SOURCES_INSTALLED


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store of the test's own (the service's tiers make it the service's store too)."""
    folder = tmp_path / "store"
    folder.mkdir()
    return folder


@pytest.fixture
def harness_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set this process's ``SIMRUN_*`` environment for a ``main([...])`` called in-process."""

    def apply(**values: str) -> None:
        for name in list(os.environ):
            if name.startswith("SIMRUN_"):
                monkeypatch.delenv(name)
        for name in (*THREAD_VARIABLES, HARNESS_STARTED, SOURCES_INSTALLED):
            monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the test
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return apply


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Path]:
    """A directory for the output of spawned processes."""
    directory = tmp_path / "logs"
    directory.mkdir()
    yield directory
