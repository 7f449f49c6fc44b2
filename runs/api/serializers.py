"""Output serializers of the API; a run's input is a specification, validated by
``runs.planning.spec``.

Serializers only shape what the views computed: progress (``units_now``, ``units_*_sum``) is
attached to the objects by the views before they are serialized.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from runs.common import labels
from runs.models import ATTEMPT_OUTCOME_FIELDS, Attempt, Observation, Run, Snapshot, Task
from runs.reads import accounting
from runs.reads.listed_json import listed_document
from runs.reads.live_attempts import live_figures
from runs.reads.shown import shown_run_state, shown_state


class PlanSerializer(serializers.Serializer[dict[str, Any]]):
    """The TaskPlan decided at submission (``runs.backends.base.TaskPlan``)."""

    cores = serializers.IntegerField()
    memory_gb = serializers.FloatField(help_text="per pod")
    workers = serializers.IntegerField(required=False)
    base_gb = serializers.FloatField(required=False)
    per_worker_gb = serializers.FloatField(required=False)
    processes = serializers.IntegerField(required=False)
    retry_memory_gb = serializers.FloatField(required=False, help_text="after a kill for memory")
    coordinator_merges = serializers.BooleanField(required=False)
    why = serializers.CharField(
        required=False, allow_blank=True, help_text="how it was decided, with the arithmetic"
    )
    why_short = serializers.CharField(
        required=False, allow_blank=True, help_text="the reason in one plain sentence"
    )
    features = serializers.DictField(
        child=serializers.FloatField(),
        required=False,
        help_text="what was known of the task when it was planned (its numeric settings, units, "
        "cores): the evidence of tasks near these planned it (why_short says which)",
    )


class AttemptSerializer(serializers.ModelSerializer[Attempt]):
    phase = serializers.SerializerMethodField(
        help_text="its pod's phase as last polled; Stopped: it was running when its task or "
        "run ended"
    )
    running = serializers.SerializerMethodField(help_text="its pod runs now")
    duration_s = serializers.SerializerMethodField(
        help_text="from its start to its end, or to now while it runs; null without a start"
    )
    peak_bytes = serializers.SerializerMethodField(
        help_text="the peak memory its report measured, or the largest of its live samples so "
        "far; null before any (memory_gb is its limit)"
    )
    memory_samples = serializers.SerializerMethodField(
        help_text="while it runs: its recent memory as [Unix time, bytes], one per heartbeat"
    )

    class Meta:
        model = Attempt
        fields = [
            "worker",
            "attempt",
            *ATTEMPT_OUTCOME_FIELDS,
            "started_at",
            "ended_at",
            "running",
            "duration_s",
            "peak_bytes",
            "memory_samples",
            "not_evidence",
        ]

    def get_phase(self, attempt: Attempt) -> str:
        return live_figures(attempt).phase

    def get_running(self, attempt: Attempt) -> bool:
        return live_figures(attempt).running

    def get_duration_s(self, attempt: Attempt) -> float | None:
        return live_figures(attempt).duration_s

    def get_peak_bytes(self, attempt: Attempt) -> int | None:
        return live_figures(attempt).peak_bytes

    @extend_schema_field({"type": "array", "items": {"type": "array", "items": {"type": "number"}}})
    def get_memory_samples(self, attempt: Attempt) -> list[list[float]]:
        return [[t, b] for t, b in live_figures(attempt).samples]


class TaskSerializer(serializers.ModelSerializer[Task]):
    id = serializers.CharField(source="task_id")
    plan = PlanSerializer()
    units_done = serializers.IntegerField(source="units_now", help_text="units done by now")
    attempts = AttemptSerializer(many=True, read_only=True)
    shown_state = serializers.SerializerMethodField(
        help_text='what happened, in words: the state, "stopped: run cancelled" for a task '
        'skipped when its run was cancelled while it ran, or "reused from <run>" for one done '
        "from the outputs of that run's task with its key"
    )
    reused_from = serializers.SerializerMethodField(
        help_text="the earlier task whose work it reused (docs/resume.md), as {run, task}; "
        "null when it reused nothing"
    )
    units_failed = serializers.IntegerField(
        help_text="its units done that failed (allowed by failures.allowed): rows of its "
        "results table with an error"
    )
    unit_failure = serializers.CharField(
        help_text="why its first failed unit failed: the unit, its parameters, its error"
    )
    units_reused = serializers.SerializerMethodField(
        help_text="its units copied from reused_from, done without computing (all of them "
        "for a task done from its outputs)"
    )

    class Meta:
        model = Task
        fields = [
            "id",
            "kind",
            "type",
            "settings",
            "inputs",
            "command",
            "image",
            "plan",
            "state",
            "shown_state",
            "message",
            "units_done",
            "units_total",
            "units_failed",
            "unit_failure",
            "reused_from",
            "units_reused",
            "not_reused",
            "key",
            "started_at",
            "ended_at",
            "attempts",
        ]

    def get_shown_state(self, task: Task) -> str:
        return shown_state(
            task.state,
            task.reused_run if task.reused_whole else "",
            stopped_by=task.stopped_by,
        )

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {"run": {"type": "string"}, "task": {"type": "string"}},
        }
    )
    def get_reused_from(self, task: Task) -> dict[str, str] | None:
        if not task.reused_run:
            return None
        run, _, task_id = task.reused_from.partition("/")
        return {"run": run, "task": task_id}

    def get_units_reused(self, task: Task) -> int:
        return task.units_reused or 0


class RunSerializer(serializers.ModelSerializer[Run]):
    owner = serializers.CharField(source="owner.get_username")
    live = serializers.BooleanField(
        help_text="followed by the control loop: not ended, or work pending"
    )
    duration_s = serializers.FloatField(help_text="from creation to its end, or to now")
    units_done = serializers.IntegerField(source="units_done_sum", help_text="over its tasks")
    units_total = serializers.IntegerField(source="units_total_sum", help_text="over its tasks")
    units_failed = serializers.IntegerField(
        source="units_failed_sum", help_text="units done that failed (allowed), over its tasks"
    )
    rerun_of = serializers.CharField(
        source="rerun_of_id", allow_null=True, help_text="the run this one re-runs, if any"
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "name",
            "owner",
            "state",
            "message",
            "backend",
            "live",
            "units_done",
            "units_total",
            "units_failed",
            "duration_s",
            "created_at",
            "submitted_at",
            "ended_at",
            "rerun_of",
        ]

    def to_representation(self, run: Run) -> dict[str, Any]:
        """The fields above as a list shows them (``listed_document``), built directly: a
        list of runs is the API's hottest answer. A subclass adds fields: DRF builds it."""
        if type(self) is not RunSerializer:
            return super().to_representation(run)
        return listed_document(run)


class RunDetailSerializer(RunSerializer):
    tasks = TaskSerializer(many=True, read_only=True)
    shown_state = serializers.SerializerMethodField(
        help_text='what it is, in words: its state, but "queued" while it runs and none of '
        "its tasks started yet"
    )
    usage = serializers.SerializerMethodField(
        help_text="GiB·h its observed attempts used, over-sized and lost to kills (in all "
        "and by task), the memory each task was given beside what simrun's sizing policy and "
        "Kubernetes' VPA would have given it, and what VPA's allocation would have wasted"
    )
    submitted_by = serializers.CharField(
        source="submitted_by.get_username",
        allow_null=True,
        default=None,
        help_text="who submitted it for its owner (staff who re-ran another user's run; its "
        "code runs as its owner's task user), null for its owner",
    )
    reruns = serializers.ListField(
        child=serializers.CharField(),
        source="rerun_ids",
        read_only=True,
        help_text="the runs that re-run this one, newest first (those you may see)",
    )
    resume_of = serializers.SerializerMethodField(
        help_text="the run this one resumes (its rerun_of, whose finished work it reuses); "
        "null when it is no resume"
    )

    class Meta(RunSerializer.Meta):
        fields = [
            *RunSerializer.Meta.fields,
            "tags",
            "note",
            "shown_state",
            "workflow",
            "image",
            "reserved_node",
            "memory_enforced",
            "pending_cancel",
            "pending_release",
            "pending_logs",
            "spec",
            "tasks",
            "submitted_by",
            "reruns",
            "resume_of",
            "usage",
            "refused",
        ]

    def get_shown_state(self, run: Run) -> str:
        return shown_run_state(run.state, [task.state for task in run.tasks.all()])

    def get_resume_of(self, run: Run) -> str | None:
        return run.rerun_of_id if run.resume else None

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_usage(self, run: Run) -> dict[str, Any]:
        return accounting.run_usage(run, run.tasks.all()).as_dict()


@cache
def run_detail_serializer() -> RunDetailSerializer:
    """One run's serializer per process, its fields (its tasks', attempts' and plan's with
    them) built at its first answer: DRF builds a serializer's fields anew for each instance,
    reading the model's fields again, most of the cost of a run's answer. Its
    ``to_representation`` keeps nothing on it, so every request may share it."""
    return RunDetailSerializer()


class LogSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="<node>-<attempt>, how to ask for its text")
    node = serializers.CharField()
    attempt = serializers.IntegerField()
    size = serializers.IntegerField(help_text="bytes")
    running = serializers.BooleanField(help_text="its process still writes it")
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field, not Field.source
        choices=["store", "backend"]
    )


class LogTextSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(source="log.name")
    node = serializers.CharField(source="log.node")
    attempt = serializers.IntegerField(source="log.attempt")
    running = serializers.BooleanField(source="log.running")
    text = serializers.CharField(allow_blank=True)
    offset = serializers.IntegerField(
        help_text="the byte up to which text goes: pass it as offset to follow"
    )


class OutputSerializer(serializers.Serializer[Any]):
    path = serializers.CharField(
        help_text="relative to the task's out/; bytes that are not UTF-8 and characters that do "
        "not print (a newline) escaped, \\xff, \\n"
    )
    size = serializers.IntegerField()
    is_image = serializers.BooleanField()
    inline = serializers.BooleanField(help_text="small enough to show in a page")
    url = serializers.CharField(
        allow_null=True, help_text="null for a name no URL can carry (an escaped one)"
    )


class PlacementSerializer(serializers.Serializer[Any]):
    run = serializers.CharField(source="run_id", allow_null=True)
    workflow = serializers.CharField(source="placement.workflow")
    dag_task = serializers.CharField(source="placement.dag_task")
    pod = serializers.CharField(source="placement.pod")
    node = serializers.CharField(source="placement.node", allow_null=True)
    phase = serializers.CharField(source="placement.phase")
    cores = serializers.FloatField(source="placement.cores")
    memory_gb = serializers.FloatField(source="placement.memory_gb")
    worker = serializers.CharField(source="placement.worker", allow_null=True)
    attempt = serializers.IntegerField(source="placement.attempt", allow_null=True)


class NodeSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    ready = serializers.BooleanField(source="node.ready")
    cores = serializers.FloatField(source="node.cores")
    memory_gb = serializers.FloatField(source="node.memory_gb")
    cores_used = serializers.FloatField()
    memory_gb_used = serializers.FloatField()
    pods = serializers.IntegerField(source="pod_count")
    reserved = serializers.BooleanField()
    reserved_by = serializers.CharField(
        source="reserved_run", allow_null=True, help_text="the run holding it, if you may see it"
    )


class ObservationSerializer(serializers.ModelSerializer[Observation]):
    task = serializers.CharField(source="task.task_id", allow_null=True, default=None)
    peak_gb_per_process = serializers.FloatField(allow_null=True)

    class Meta:
        model = Observation
        fields = [
            "id",
            "task_type",
            "run",
            "task",
            "worker",
            "attempt",
            "processes",
            "per_worker_gb",
            "peak_bytes",
            "limit_bytes",
            "peak_gb_per_process",
            "units",
            "unit_seconds",
            "cpu_seconds",
            "oom",
            "from_report",
            "created_at",
        ]


class TaskTypeSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["split", "plugin"])
    description = serializers.CharField(source="task_type.description", allow_blank=True)
    default_per_worker_gb = serializers.FloatField(source="task_type.per_worker_gb")
    base_gb = serializers.FloatField(source="task_type.base_gb")
    observations = serializers.IntegerField(help_text="the latest ones the planner reads")
    oom_kills = serializers.IntegerField()
    planned_per_worker_gb = serializers.FloatField(
        source="per_worker_gb", help_text="what a new task of this type gets now"
    )
    why = serializers.CharField()


class SnapshotSerializer(serializers.ModelSerializer[Snapshot]):
    id = serializers.CharField(source="digest", help_text="name it in a spec's sources")

    class Meta:
        model = Snapshot
        fields = ["id", "name", "size_bytes", "created_at"]


class MeSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(source="get_username")
    is_staff = serializers.BooleanField()


class ErrorSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()


class ResultsColumnSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    numeric = serializers.BooleanField(help_text="every cell is a number or no value")


# Declared from the rule of labels (runs.common.labels), which the run page checks too; the
# docstring is the schema's description.
class RunLabelsSerializer(serializers.Serializer[dict[str, Any]]):
    """What an owner files a run under: its tags and its note; the fields not given stay."""

    tags = serializers.ListField(
        child=serializers.RegexField(labels.TAG, error_messages={"invalid": labels.TAG_RULE}),
        required=False,
        max_length=labels.MAX_TAGS,
        help_text="words to find it by (runs?tag=...), replacing its tags",
    )
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=labels.NOTE_CHARS,
        help_text="a note, replacing its note",
    )


class ResultsPageSerializer(serializers.Serializer[Any]):
    """A page of a task's results table (``runs.reads.results``)."""

    columns = ResultsColumnSerializer(many=True)
    count = serializers.IntegerField(help_text="rows of the table read, kept or not")
    count_exact = serializers.BooleanField(
        help_text="false when the file was not read whole (too large or malformed)"
    )
    kept = serializers.IntegerField(help_text="rows the pages hold, in unit order unless sorted")
    notes = serializers.ListField(
        child=serializers.CharField(), help_text="what was left out of the table, and why"
    )
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = serializers.ListField(
        child=serializers.DictField(allow_null=True),
        help_text="a row per unit: numbers as numbers, no value as null",
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        """The fields above and ``partial``, a name a serializer's class cannot declare (it is
        its flag for partial updates)."""
        fields = super().get_fields()
        fields["partial"] = serializers.BooleanField(
            help_text="the task ended before its merge (cancelled, failed): the rows of the "
            "units it finished, as each ended"
        )
        return fields
