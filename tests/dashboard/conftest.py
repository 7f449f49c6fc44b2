"""Fixtures of the dashboard's tests."""

import pytest
from django.test import Client

from tests.dashboard.logins import logged_in


@pytest.fixture(autouse=True)
def handed_off(queued, learning, settled) -> None:
    """The Celery tasks these tests hand runs to are recorded, not sent."""


@pytest.fixture
def alice(owner) -> Client:
    """The owner of the tests' runs, logged in."""
    return logged_in(owner)


@pytest.fixture
def mallory(stranger) -> Client:
    """Another user, logged in."""
    return logged_in(stranger)


@pytest.fixture
def operator(staff) -> Client:
    """A staff user, logged in."""
    return logged_in(staff)
