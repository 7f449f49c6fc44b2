"""simrun's refusals: errors a domain function raises that an edge turns into an answer.

Each carries the HTTP status it means, so the API renders them in one place
(``runs.api.errors``) and the pages show their text, instead of every view catching each.
"""

from __future__ import annotations


class Refusal(Exception):
    """A request this service refuses, with a message that names why and the fix."""

    status_code = 400


class QueueFull(Refusal):
    """The owner has as many runs not ended as this service queues per user
    (``SIMRUN_USER_QUEUED_RUNS``): refused at once, the bound named."""

    status_code = 429


class CannotRun(Refusal):
    """This service cannot run such a run as it is set up (not a fault of the spec): refused
    at once, naming the fix, rather than accepted to fail every task."""

    status_code = 503


class Conflict(Refusal, ValueError):
    """The request does not fit the run's state now (cancelling a run that ended)."""

    status_code = 409


def field_sentences(errors: object, item: str = "value") -> list[str]:
    """A field's errors as a list of sentences: those of a list's items, which DRF and
    ``labels.problems`` key by position, name the ``item`` by its number, counted from 1
    ("tag 2: ..."), so a 400 keeps its schema's shape (a field, its messages)."""
    if isinstance(errors, dict):
        return [f"{item} {int(i) + 1}: {m}" for i, found in errors.items() for m in found]
    return [str(m) for m in errors]  # type: ignore[attr-defined]
