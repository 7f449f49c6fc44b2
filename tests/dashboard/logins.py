"""Clients of the dashboard's tests, logged in as a user."""

from __future__ import annotations

from typing import Any

from django.test import Client


def logged_in(user: Any) -> Client:
    """A test client with ``user``'s session."""
    client = Client()
    client.force_login(user)
    return client
