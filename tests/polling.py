"""Waiting in tests for something another process does: poll with a deadline, never sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T],
    timeout_s: float = 60.0,
    what: str = "",
    *,
    interval_s: float = 0.05,
    details: Callable[[], str] | None = None,
) -> T:
    """Poll ``check`` until it returns something true and return it; after ``timeout_s`` fail
    naming ``what``, with ``details()`` (e.g. a service's logs) when given."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details is not None else ""
            raise AssertionError(
                f"timed out after {timeout_s:g} s waiting for {what or check}{extra}"
            )
        time.sleep(interval_s)
