"""The admin: the operators' tool over every model.

What the control loop observes is read-only here: a run changes only through its actions
(cancel, settle now, release a reservation), which go through the same compare-and-set
writes and Celery tasks as the API, so an operator never races the loop. Runs are
submitted through the API or the dashboard, not added here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from runs.common import token_admin  # noqa: F401 (registers)
from runs.common.errors import Conflict
from runs.control import cancelling, reservations
from runs.models import ATTEMPT_OUTCOME_FIELDS, Attempt, Observation, Run, Snapshot, Task
from runs.reads import accounting

if TYPE_CHECKING:
    # The stubs' admin classes take their models; Django's cannot be subscripted at run time.
    _TaskTabularInline = admin.TabularInline[Task, Run]
    _AttemptTabularInline = admin.TabularInline[Attempt, Task]
    _RunModelAdmin = admin.ModelAdmin[Run]
    _TaskModelAdmin = admin.ModelAdmin[Task]
    _AttemptModelAdmin = admin.ModelAdmin[Attempt]
    _ObservationModelAdmin = admin.ModelAdmin[Observation]
    _SnapshotModelAdmin = admin.ModelAdmin[Snapshot]
else:
    _TaskTabularInline = _AttemptTabularInline = admin.TabularInline
    _RunModelAdmin = _TaskModelAdmin = _AttemptModelAdmin = admin.ModelAdmin
    _ObservationModelAdmin = _SnapshotModelAdmin = admin.ModelAdmin


class ReadOnlyMixin:
    """Rows written by the service: shown, never added or edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TaskInline(ReadOnlyMixin, _TaskTabularInline):
    model = Task
    extra = 0
    fields = ["task_id", "kind", "type", "state", "units_done", "units_total", "message"]
    readonly_fields = cast(list[str], fields)  # the list above, widened by the stub
    ordering = ["position"]
    show_change_link = True
    can_delete = False


@admin.register(Run)
class RunAdmin(_RunModelAdmin):
    list_display = [
        "id",
        "name",
        "owner",
        "state_badge",
        "backend",
        "reserved_node",
        "pending",
        "created_at",
        "ended_at",
    ]
    list_filter = ["state", "backend", "pending_logs", "pending_release", "pending_cancel"]
    list_select_related = ["owner"]
    search_fields = ["id", "name", "owner__username", "workflow", "reserved_node"]
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in Run._meta.fields] + ["dashboard", "memory_use"]
    fieldsets = [
        (None, {"fields": ["id", "name", "owner", "state", "message", "dashboard"]}),
        (
            "Backend",
            {"fields": ["backend", "workflow", "image", "reserved_node", "local_commands"]},
        ),
        (
            "Control loop",
            {
                "fields": [
                    "pending_logs",
                    "pending_release",
                    "pending_cancel",
                    "merge_pending",
                    "oom_kills",
                    "reports_pending",
                    "failed_seen",
                    "memory_enforced",
                    "version",
                    "reconcile_failures",
                    "reconcile_after",
                ]
            },
        ),
        ("Memory", {"fields": ["memory_use"]}),
        ("Times", {"fields": ["created_at", "submitted_at", "ended_at", "updated_at"]}),
        ("Specification", {"classes": ["collapse"], "fields": ["spec"]}),
    ]
    inlines = [TaskInline]
    actions = ["cancel_runs", "settle_now", "release_reservations"]

    class Media:
        css = {"all": ["runs/admin.css"]}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="state", ordering="state")
    def state_badge(self, run: Run) -> str:
        return format_html('<span class="simrun-state state-{}">{}</span>', run.state, run.state)

    @admin.display(description="memory use")
    def memory_use(self, run: Run) -> str:
        usage = accounting.run_usage(run).total
        if not usage.attempts:
            return "no attempt observed yet"
        return usage_text(usage)

    @admin.display(description="pending")
    def pending(self, run: Run) -> str:
        flags = [
            name
            for name, value in (
                ("logs", run.pending_logs),
                ("release", run.pending_release),
                ("cancel", run.pending_cancel),
            )
            if value
        ]
        return ", ".join(flags) or "–"

    @admin.display(description="dashboard")
    def dashboard(self, run: Run) -> str:
        return format_html(
            '<a href="{}">open the run in the dashboard</a>',
            reverse("runs:run-detail", args=[run.id]),
        )

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        cancelled, refused = [], []
        for run in queryset:
            try:
                cancelling.request_cancel(run)
                cancelled.append(run.id)
            except Conflict as error:
                refused.append(str(error))
        if cancelled:
            self.message_user(request, f"Cancelled {', '.join(cancelled)}.", messages.SUCCESS)
        for reason in refused:
            self.message_user(request, reason, messages.WARNING)

    @admin.action(description="Settle now: retry pending logs, cancel and release")
    def settle_now(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        from runs.tasks import settle

        runs = list(queryset)
        pending = [r for r in runs if r.ended]
        for run in pending:
            settle.delay(run.id)
        skipped = len(runs) - len(pending)
        self.message_user(request, f"Settling {len(pending)} ended run(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} live run(s) left to the control loop.", messages.WARNING
            )

    @admin.action(description="Release the reserved node of the selected (ended) runs")
    def release_reservations(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for run in queryset:
            try:
                reservations.release_reservation(run=run)
            except reservations.ReleaseRefused as error:
                self.message_user(request, str(error), messages.WARNING)
            else:
                self.message_user(
                    request,
                    f"The node {run.reserved_node} will be released from run {run.id}.",
                    messages.SUCCESS,
                )


class AttemptInline(ReadOnlyMixin, _AttemptTabularInline):
    model = Attempt
    extra = 0
    fields = ["worker", "attempt", *ATTEMPT_OUTCOME_FIELDS, "started_at", "ended_at"]
    readonly_fields = cast(list[str], fields)  # the list above, widened by the stub
    can_delete = False


@admin.register(Task)
class TaskAdmin(ReadOnlyMixin, _TaskModelAdmin):
    list_display = ["__str__", "kind", "type", "state", "units_done", "units_total", "ended_at"]
    list_filter = ["state", "kind", "type"]
    list_select_related = ["run"]
    search_fields = ["run__id", "task_id", "type"]
    readonly_fields = [f.name for f in Task._meta.fields]
    inlines = [AttemptInline]


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyMixin, _AttemptModelAdmin):
    list_display = [
        "task",
        "worker",
        "attempt",
        "phase",
        "exit_code",
        "oom_killed",
        "evicted",
        "node_name",
        "memory_gb",
    ]
    list_filter = ["phase", "oom_killed", "evicted"]
    list_select_related = ["task", "task__run"]
    search_fields = ["task__run__id", "worker", "node_name"]
    readonly_fields = [f.name for f in Attempt._meta.fields]


def usage_text(usage: accounting.Usage) -> str:
    """A run's memory use in one line, with what VPA's sizing would have wasted."""
    w = usage.wastage
    text = (
        f"{usage.attempts} attempts: used {w.used_gbh:.3f} GiB·h, wasted {w.wasted_gbh:.3f} "
        f"GiB·h (over-sized {w.over_gbh:.3f}, killed {w.under_gbh:.3f}), MAQ {w.maq:.2f}"
    )
    vpa = usage.counterfactual.get("vpa")
    return text + (f"; VPA's sizing would have wasted {vpa.wasted_gbh:.3f} GiB·h" if vpa else "")


@admin.register(Observation)
class ObservationAdmin(ReadOnlyMixin, _ObservationModelAdmin):
    list_display = [
        "task_type",
        "run",
        "worker",
        "attempt",
        "processes",
        "per_worker_gb",
        "peak_per_process",
        "wasted_gbh",
        "oom",
        "from_report",
        "created_at",
    ]
    list_filter = ["task_type", "oom", "from_report"]
    list_select_related = ["run"]
    search_fields = ["task_type", "run__id", "worker"]
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in Observation._meta.fields]

    @admin.display(description="wasted GiB·h")
    def wasted_gbh(self, observation: Observation) -> str:
        return f"{accounting.Attempted.of(observation).wastage().wasted_gbh:.4f}"

    @admin.display(description="peak GiB / process")
    def peak_per_process(self, observation: Observation) -> str:
        gb = observation.peak_gb_per_process
        return "–" if gb is None else f"{gb:.3f}"


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyMixin, _SnapshotModelAdmin):
    list_display = ["digest", "name", "owner", "size_bytes", "created_at"]
    list_select_related = ["owner"]
    search_fields = ["digest", "name", "owner__username"]
    readonly_fields = [f.name for f in Snapshot._meta.fields]
