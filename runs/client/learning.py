"""Waiting for a submission whose sources' task types the service learns (docs/task-types.md).

A run whose sources ship a type the service has not learned yet is answered at once (202),
``learning``: a worker installs the sources and asks their types what they make of the run's
settings. The settings a type refuses are then a problem of the submission, not of a run: the
client waits for the learning and raises them as the 400 of a type already known would be,
``InvalidRequest`` by the path of their field (``tasks.decay.settings.steps``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runs.client.errors import InvalidRequest, field_problems, problem_lines

if TYPE_CHECKING:
    from runs.client.api import Client

LEARNING = "learning"


def learned(
    client: Client,
    run: dict[str, Any],
    *,
    report: Callable[[str], None],
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """The run once its sources' types are learned (it is planned, or it failed); a run they
    refused raises ``InvalidRequest`` with the problems by field. A run not learning is
    returned as it is."""
    if run.get("state") != LEARNING:
        return run
    report(f"run {run['id']} is learning the task types its sources ship: waiting for them")
    try:
        while run.get("state") == LEARNING:
            sleep(poll_s)
            run = client.poll(run["id"], sleep=sleep)
    except KeyboardInterrupt:
        report(f"stopped waiting: run {run['id']} goes on (simrun show {run['id']})")
        raise
    if refused := run.get("refused"):
        fields = field_problems(refused)
        problems = problem_lines(fields)
        raise InvalidRequest(f"refused (run {run['id']} failed):\n{problems}", fields, problems)
    return run
