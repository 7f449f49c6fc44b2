"""Output serializers of the API; input is a run specification, validated by ``runs.spec``."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import Run, Task


class TaskSerializer(serializers.ModelSerializer[Task]):
    id = serializers.CharField(source="task_id")

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
            "message",
            "units_done",
            "units_total",
            "started_at",
            "ended_at",
        ]


class RunSerializer(serializers.ModelSerializer[Run]):
    owner = serializers.CharField(source="owner.get_username")

    class Meta:
        model = Run
        fields = [
            "id",
            "name",
            "owner",
            "state",
            "message",
            "backend",
            "workflow",
            "image",
            "reserved_node",
            "memory_enforced",
            "created_at",
            "submitted_at",
            "ended_at",
        ]


class RunDetailSerializer(RunSerializer):
    tasks = TaskSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "spec", "tasks"]
