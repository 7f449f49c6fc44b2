"""The state a badge, a row and ``simrun show`` name: the record's, said as a person reads it."""

from __future__ import annotations

from collections.abc import Collection

from runs.models import RunState, TaskState


def shown_state(state: str, reused_from: str = "", *, stopped_by: str = "") -> str:
    """What a task's badge and ``simrun show`` say it is: its state, but "stopped: run
    cancelled" (or "stopped: run failed") for one its run's end stopped while it ran
    (``Task.stopped_by``), whose record stays skipped as the spec says, and "reused from <run>"
    for one done from the outputs of a task of ``reused_from``."""
    if reused_from:
        return f"reused from {reused_from}"
    if state != TaskState.SKIPPED or not stopped_by:
        return state
    return f"stopped: run {stopped_by}"


def shown_run_state(state: str, task_states: Collection[str]) -> str:
    """What a run's badge and ``simrun show`` say it is: "queued" while it runs but none of
    its tasks started yet (each queued for the cores, or waiting for one that is), else its
    state."""
    unstarted = (TaskState.WAITING, TaskState.QUEUED)
    if state == RunState.RUNNING and task_states and all(s in unstarted for s in task_states):
        return TaskState.QUEUED.value
    return state
