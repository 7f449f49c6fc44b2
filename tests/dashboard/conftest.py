"""Fixtures of the dashboard's tests."""

import pytest


@pytest.fixture(autouse=True)
def handed_off(queued, learning, settled) -> None:
    """The Celery tasks these tests hand runs to are recorded, not sent."""
