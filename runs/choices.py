"""The states and kinds of runs and tasks, a run's id and an attempt's outcome: the values the
record stores."""

from __future__ import annotations

import secrets
import string

from django.db import models

RUN_ID_ALPHABET = string.ascii_lowercase + string.digits
RUN_ID_LENGTH = 10


def new_run_id() -> str:
    """A short random id: a letter, then letters and digits (a valid Kubernetes name)."""
    first = secrets.choice(string.ascii_lowercase)
    return first + "".join(secrets.choice(RUN_ID_ALPHABET) for _ in range(RUN_ID_LENGTH - 1))


class RunState(models.TextChoices):
    LEARNING = "learning"
    SUBMITTING = "submitting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ENDED_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


class TaskKind(models.TextChoices):
    SPLIT = "split"
    PLUGIN = "plugin"
    COMMAND = "command"


class TaskState(models.TextChoices):
    WAITING = "waiting"
    QUEUED = "queued"
    RUNNING = "running"
    PREEMPTED = "preempted"
    RETRYING = "retrying"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


FINAL_TASK_STATES = (TaskState.DONE, TaskState.FAILED, TaskState.SKIPPED)


class Reuse(models.TextChoices):
    """What a task reuses of an earlier task with its key (docs/resume.md)."""

    NONE = "", "nothing"
    WHOLE = "whole", "its outputs: done at once"
    UNITS = "units", "its done units: computes only the others"


STOPPED_WHILE_IT_RAN = "stopped while it ran: "
"""The start of the message of a task its run's end stopped while it ran
(``runs.control.closing.stopped_messages``); the run's message follows it."""

ATTEMPT_OUTCOME_FIELDS = (
    "phase",
    "exit_code",
    "oom_killed",
    "oom_evidence",
    "evicted",
    "node_name",
    "memory_gb",
    "message",
    "reason",
)
"""What a poll learns of an attempt from the backend: a later poll of it rewrites them."""
