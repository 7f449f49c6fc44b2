"""The record of simrun: runs, their tasks, the attempts of their pods, observations.

The database is the record and the index of the runs; the controller keeps no state in
memory, so everything it needs between two polls is here. A run is written
compare-and-set on its ``version`` (``write_if_unchanged``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from runs.choices import (
    ATTEMPT_OUTCOME_FIELDS,
    ENDED_STATES,
    FINAL_TASK_STATES,
    RUN_ID_ALPHABET,
    RUN_ID_LENGTH,
    STOPPED_WHILE_IT_RAN,
    Reuse,
    RunState,
    TaskKind,
    TaskState,
    new_run_id,
)
from runs.owned import Profile, Snapshot
from runs.querysets import (
    LISTED,
    LIVE,
    PENDING_AFTER_END,
    POLL_WATCHED,
    WAITS,
    Liveness,
    RunQuerySet,
)

__all__ = [
    "ATTEMPT_OUTCOME_FIELDS",
    "ENDED_STATES",
    "FINAL_TASK_STATES",
    "LISTED",
    "LIVE",
    "PENDING_AFTER_END",
    "POLL_WATCHED",
    "RUN_ID_ALPHABET",
    "RUN_ID_LENGTH",
    "STOPPED_WHILE_IT_RAN",
    "Attempt",
    "Liveness",
    "Observation",
    "Profile",
    "Reuse",
    "Run",
    "RunQuerySet",
    "RunState",
    "Snapshot",
    "Task",
    "TaskKind",
    "TaskState",
    "WAITS",
    "new_run_id",
]
"""The record's names: the models, and the states and queries they are made of (``choices``,
``querysets``), which every room imports from here."""


class Run(Liveness, models.Model):
    """One submission: a DAG of tasks, an environment, source snapshots, an owner."""

    id = models.CharField(primary_key=True, max_length=16, default=new_run_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs"
    )
    name = models.CharField(max_length=200, blank=True)
    spec = models.JSONField(help_text="The validated run specification as submitted.")
    spec_text = models.TextField(
        blank=True,
        help_text="The specification's text as submitted (YAML or JSON, comments kept): what "
        "Edit and re-run starts from. Empty for runs submitted before it was kept.",
    )
    backend = models.CharField(max_length=20)
    state = models.CharField(max_length=20, choices=RunState.choices, default=RunState.SUBMITTING)
    message = models.TextField(blank=True)
    tags = models.JSONField(
        default=list, blank=True, help_text="Words its owner files it under, to find it by."
    )
    note = models.TextField(blank=True, help_text="Its owner's note on it.")
    refused = models.JSONField(
        default=dict,
        blank=True,
        help_text="Why the learning of its sources' types refused it, by the path of the field "
        "(tasks.decay.settings.steps), as a 400 says it: the run failed at submission.",
    )
    workflow = models.CharField(max_length=100, blank=True, help_text="Name in the backend.")
    image = models.CharField(max_length=500, blank=True)
    reserved_node = models.CharField(max_length=253, blank=True)
    local_commands = models.CharField(
        max_length=10, blank=True, help_text="direct or docker: how command tasks run locally."
    )
    pending_release = models.BooleanField(default=False)
    pending_cancel = models.BooleanField(default=False)
    pending_logs = models.BooleanField(default=False)
    merge_pending = models.JSONField(
        default=dict,
        blank=True,
        help_text="Task id -> epoch seconds of the first poll that saw its coordinator merge.",
    )
    oom_kills = models.JSONField(
        default=dict, blank=True, help_text="Worker id -> attempts killed for memory."
    )
    memory_enforced = models.BooleanField(
        default=True, help_text="Whether the backend enforces the planned memory."
    )
    reports_pending = models.JSONField(
        default=dict,
        blank=True,
        help_text="<worker>-<attempt> -> first seen, of exits 137 whose report is awaited.",
    )
    failed_seen = models.PositiveIntegerField(
        default=0, help_text="Failed attempts of the backend's status already recorded."
    )
    attempts_seen = models.JSONField(
        default=dict,
        blank=True,
        help_text="Worker id -> '<attempt> <phase>' of its latest attempt recorded running or "
        "succeeded.",
    )
    version = models.PositiveIntegerField(default=0)
    polled = models.CharField(
        max_length=16, blank=True, help_text="Its last poll, as runs.control.poll_memory keeps it."
    )
    reconcile_failures = models.PositiveIntegerField(default=0)
    reconcile_after = models.DateTimeField(
        null=True, blank=True, help_text="A run whose reconcile crashed is pushed aside until then."
    )
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who submitted it for its owner (staff who re-ran another user's run); "
        "empty: its owner. Its code runs as its owner's task user either way.",
    )
    rerun_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reruns",
        help_text="The run whose spec this one was submitted again from.",
    )
    resume = models.BooleanField(
        default=False,
        help_text="A re-run that reuses what rerun_of finished (Resume): its tasks whose key "
        "is a task's there.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The loop's query, RunQuerySet.live(): runs not ended or with work pending.
            models.Index(
                fields=["created_at"],
                name="run_live_idx",
                condition=LIVE,
            ),
            # A pass of the loop reads only what changed (runs.control.poll_memory): the runs
            # written since its last read, and the live ones that wait for something in time.
            models.Index(fields=["updated_at"], name="run_updated_idx"),
            models.Index(fields=["created_at"], name="run_waits_idx", condition=LIVE & WAITS),
            # The runs list, newest first: of staff (every run), of a user, of a state. With
            # the id and the name, the list finds the runs its page and its count need in the
            # index alone (runs.reads.listed_json), on PostgreSQL, a filter by a part of the name
            # included: a name common enough to fill the count is met sooner walking the index
            # than gathered from the trigram index and sorted.
            models.Index(fields=["-created_at"], include=LISTED, name="run_created_idx"),
            models.Index(
                fields=["owner", "-created_at"], include=LISTED, name="run_owner_created_idx"
            ),
            models.Index(
                fields=["state", "-created_at"], include=LISTED, name="run_state_created_idx"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in ENDED_STATES]) | Q(ended_at__isnull=True),
                name="run_ended_at_only_when_ended",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=[s.value for s in ENDED_STATES]) | Q(ended_at__isnull=False),
                name="run_ended_has_ended_at",
            ),
            models.CheckConstraint(
                condition=Q(local_commands__in=["", "direct", "docker"]),
                name="run_local_commands_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}".strip()

    @property
    def duration_s(self) -> float:
        end = self.ended_at or timezone.now()
        return (end - self.created_at).total_seconds()


class Task(models.Model):
    """A node of the DAG of a run: a split task, a plugin task or a command task."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tasks")
    task_id = models.CharField(max_length=40)
    kind = models.CharField(max_length=10, choices=TaskKind.choices)
    type = models.CharField(max_length=100, blank=True, help_text="Task type; empty for a command.")
    settings = models.JSONField(default=dict, blank=True)
    inputs = models.JSONField(default=dict, blank=True, help_text="Port -> id of the task read.")
    command = models.JSONField(default=list, blank=True)
    image = models.CharField(max_length=500, blank=True)
    key = models.CharField(
        max_length=64,
        blank=True,
        help_text="The digest of what decides its outputs (runs.planning.keys): the same key, "
        "the same outputs. Empty for a task submitted before keys.",
    )
    named_files = models.JSONField(
        default=dict,
        blank=True,
        help_text="Path -> what it held at submission, of the programs and files its command "
        "names on the service's machine (runs.planning.programs): part of its key.",
    )
    plan = models.JSONField(help_text="The TaskPlan decided at submission.")
    state = models.CharField(max_length=20, choices=TaskState.choices, default=TaskState.WAITING)
    message = models.TextField(blank=True)
    units_done = models.PositiveIntegerField(default=0)
    units_total = models.PositiveIntegerField(default=0)
    units_failed = models.PositiveIntegerField(
        default=0,
        help_text="Units done that failed (allowed by failures.allowed), counted from "
        "progress.jsonl as they end.",
    )
    unit_failure = models.CharField(
        max_length=600,
        blank=True,
        help_text="Why its first failed unit failed: the unit, its parameters, its error.",
    )
    position = models.PositiveIntegerField(default=0, help_text="Order in the spec.")
    progress_bytes = models.PositiveBigIntegerField(
        default=0, help_text="Bytes of progress.jsonl counted into units_done."
    )
    logs_kept = models.BooleanField(
        default=False, help_text="The logs of its pods are kept in the store, its reports recorded."
    )
    reuse = models.CharField(
        max_length=10,
        choices=Reuse.choices,
        blank=True,
        help_text="What it reuses of reused_from, chosen at submission.",
    )
    reused_from = models.CharField(
        max_length=60,
        blank=True,
        help_text="<run>/<task> of the earlier task with its key whose work it reuses.",
    )
    units_reused = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The units copied from reused_from (all of them for its outputs); null while "
        "the copy is to do.",
    )
    not_reused = models.CharField(
        max_length=300,
        blank=True,
        help_text="Why the work of the run resumed or chosen for reuse was not reused (its "
        "program changed, a link in its outputs, more than the budget): the task runs in full.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    stopped_by = models.CharField(
        max_length=16,
        blank=True,
        default="",
        choices=[(RunState.CANCELLED, "its run's cancel"), (RunState.FAILED, "its run's failure")],
        help_text="Skipped because its run ended (so) while it ran: it did run, its units done "
        "kept.",
    )

    class Meta:
        ordering = ["run", "position"]
        indexes = [
            # The cache's query (runs.planning.resume.cached): the newest done task of a key.
            models.Index(
                fields=["key", "-ended_at"],
                name="task_done_key_idx",
                condition=Q(state="done") & ~Q(key=""),
            ),
            models.Index(
                fields=["run", "position"], name="task_poll_watched_idx", condition=POLL_WATCHED
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run", "task_id"], name="task_unique_id_per_run"),
            models.CheckConstraint(
                condition=Q(task_id__regex=r"^[a-z][a-z0-9-]{0,39}$"), name="task_id_valid"
            ),
            models.CheckConstraint(
                condition=Q(units_done__lte=F("units_total")), name="task_units_done_le_total"
            ),
            models.CheckConstraint(
                condition=Q(kind="command") | ~Q(type=""), name="task_typed_unless_command"
            ),
            models.CheckConstraint(
                condition=Q(units_reused__isnull=True) | Q(units_reused__lte=F("units_total")),
                name="task_units_reused_le_total",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.task_id}"

    @property
    def final(self) -> bool:
        return self.state in FINAL_TASK_STATES

    @property
    def reused_whole(self) -> bool:
        """Done from the outputs of an earlier task with its key: no backend runs it."""
        return self.reuse == Reuse.WHOLE and self.units_reused is not None

    @property
    def reused_run(self) -> str:
        """The run whose work it reused, once copied; empty otherwise."""
        return self.reused_from.partition("/")[0] if self.units_reused is not None else ""


class Attempt(models.Model):
    """One pod (one process locally) of a worker, a merge or an unsplit task."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="attempts")
    worker = models.CharField(max_length=100, help_text="Worker id, <task>-merge or the task id.")
    attempt = models.PositiveIntegerField()
    phase = models.CharField(max_length=20, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    oom_killed = models.BooleanField(default=False)
    oom_evidence = models.CharField(max_length=200, blank=True)
    evicted = models.BooleanField(default=False)
    node_name = models.CharField(max_length=253, blank=True)
    memory_gb = models.FloatField(null=True, blank=True, help_text="The memory it ran with.")
    peak_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="The peak memory its report measured."
    )
    message = models.CharField(max_length=300, blank=True, help_text="How its end was classed.")
    not_evidence = models.CharField(
        max_length=200,
        blank=True,
        help_text="Why its measured memory is no evidence for sizing (it failed, not for "
        "memory); empty when it is, or before its report was read.",
    )
    reason = models.CharField(
        max_length=200,
        blank=True,
        help_text="Why it was ended from outside (a preemption, a drain, a node's pressure).",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    log_path = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["task", "worker", "attempt"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "worker", "attempt"], name="attempt_unique_per_worker"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task} {self.worker}#{self.attempt}"


class Observation(models.Model):
    """What a worker report measured, kept per task type to plan later tasks."""

    task_type = models.CharField(max_length=100)
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, related_name="observations")
    task = models.ForeignKey(
        Task, on_delete=models.SET_NULL, null=True, related_name="observations"
    )
    worker = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField(default=0)
    processes = models.PositiveIntegerField()
    per_worker_gb = models.FloatField(help_text="GiB per process the worker was sized with.")
    peak_bytes = models.BigIntegerField(null=True, blank=True)
    limit_bytes = models.BigIntegerField(null=True, blank=True)
    units = models.PositiveIntegerField(default=0)
    unit_seconds = models.FloatField(default=0)
    cpu_seconds = models.FloatField(default=0)
    seconds = models.FloatField(
        default=0, help_text="Wall-clock seconds of the attempt (0: not known), for GiB·h."
    )
    oom = models.BooleanField(default=False, help_text="Killed for memory.")
    from_report = models.BooleanField(
        default=True, help_text="False: an OOM kill without a report, observed at its limit."
    )
    oom_kills = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The OOM killer's kills in the attempt's cgroup, as its report counted them "
        "(none without a report).",
    )
    features = models.JSONField(
        default=dict,
        db_default=models.Value({}, output_field=models.JSONField()),
        blank=True,
        help_text="What was known of the task when it was planned (its numeric settings, "
        "units, cores), from its plan: later plans read the evidence of tasks like it.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The planner's query: the latest observations of a task type.
            models.Index(fields=["task_type", "-created_at"], name="observation_type_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "worker", "attempt"], name="observation_once_per_attempt"
            ),
            models.CheckConstraint(
                condition=Q(processes__gte=1), name="observation_processes_ge_1"
            ),
            models.CheckConstraint(
                condition=Q(peak_bytes__isnull=True) | Q(peak_bytes__gte=0),
                name="observation_peak_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_type} {self.worker}#{self.attempt}"

    @property
    def limit_gb(self) -> float | None:
        """The memory limit of the attempt observed, the memory it ran with."""
        return None if self.limit_bytes is None else self.limit_bytes / 2**30

    @property
    def peak_gb_per_process(self) -> float | None:
        """The peak anonymous memory of one process in GiB (the limit for an OOM kill)."""
        peak = self.peak_bytes if self.peak_bytes is not None else self.limit_bytes
        if peak is None:
            return None
        return peak / self.processes / 2**30
