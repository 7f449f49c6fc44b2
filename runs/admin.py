"""The admin: the operators' view of every model."""

from django.contrib import admin

from runs.models import Attempt, Observation, Run, Snapshot, Task


class TaskInline(admin.TabularInline):
    model = Task
    extra = 0
    fields = ["task_id", "kind", "type", "state", "units_done", "units_total"]
    readonly_fields = fields
    show_change_link = True


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "state", "backend", "created_at", "ended_at"]
    list_filter = ["state", "backend", "pending_logs", "pending_release", "pending_cancel"]
    search_fields = ["id", "name", "owner__username", "workflow"]
    date_hierarchy = "created_at"
    readonly_fields = ["id", "version", "created_at", "updated_at", "submitted_at", "ended_at"]
    inlines = [TaskInline]


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    readonly_fields = ["worker", "attempt", "phase", "exit_code", "oom_killed", "node_name"]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "type", "state", "units_done", "units_total"]
    list_filter = ["state", "kind", "type"]
    search_fields = ["run__id", "task_id", "type"]
    inlines = [AttemptInline]


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    list_display = ["task", "worker", "attempt", "phase", "exit_code", "oom_killed", "node_name"]
    list_filter = ["phase", "oom_killed", "evicted"]
    search_fields = ["task__run__id", "worker", "node_name"]


@admin.register(Observation)
class ObservationAdmin(admin.ModelAdmin):
    list_display = [
        "task_type",
        "worker",
        "attempt",
        "processes",
        "peak_bytes",
        "oom",
        "created_at",
    ]
    list_filter = ["task_type", "oom", "from_report"]
    search_fields = ["task_type", "run__id", "worker"]


@admin.register(Snapshot)
class SnapshotAdmin(admin.ModelAdmin):
    list_display = ["digest", "name", "owner", "size_bytes", "created_at"]
    search_fields = ["digest", "name", "owner__username"]
