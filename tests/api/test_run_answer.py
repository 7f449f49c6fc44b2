"""A run's answer (``GET /api/runs/<id>/``) is built by one serializer per process, its fields
built once: DRF would build them anew, reading the models again, for every answer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework import serializers

from runs.models import Attempt, Task
from tests.factories import client_for, running, submitted


def with_attempts(run) -> None:
    """Two attempts of each task: the answer nests tasks, their plans and their attempts."""
    for task in Task.objects.filter(run=run):
        for number in range(2):
            Attempt.objects.create(
                task=task,
                worker="w0",
                attempt=number,
                phase="Failed" if number == 0 else "Succeeded",
                oom_killed=number == 0,
                memory_gb=1.5 * (number + 1),
                peak_bytes=2**30 + number,
                started_at=timezone.now(),
                ended_at=timezone.now(),
            )


def timeless(answer: Any) -> Any:
    """An answer without its durations, which run on while a run lives."""
    if isinstance(answer, dict):
        return {k: timeless(v) for k, v in answer.items() if k != "duration_s"}
    if isinstance(answer, list):
        return [timeless(item) for item in answer]
    return answer


@pytest.mark.django_db
def test_an_answer_after_the_first_builds_no_serializer_fields(owner, owner_client, monkeypatch):
    run = running(submitted(owner))
    with_attempts(run)
    built: list[str] = []
    build = serializers.ModelSerializer.get_fields

    def counted(serializer: serializers.ModelSerializer) -> Any:
        built.append(type(serializer).__name__)
        return build(serializer)

    monkeypatch.setattr(serializers.ModelSerializer, "get_fields", counted)
    first = owner_client.get(f"/api/runs/{run.id}/")
    built.clear()
    second = owner_client.get(f"/api/runs/{run.id}/")
    assert built == []
    assert timeless(second.json()) == timeless(first.json())
    assert [len(task["attempts"]) for task in second.json()["tasks"]] == [2, 2]


@pytest.mark.django_db(transaction=True)
def test_answers_made_at_once_by_the_shared_serializer_are_each_of_its_own_run(owner):
    runs = []
    for name in ["first", "second"]:
        run = running(submitted(owner, f"name: {name}\ntasks:\n  only: {{command: ['true']}}\n"))
        with_attempts(run)
        runs.append(run)
    alone = {run.id: timeless(client_for(owner).get(f"/api/runs/{run.id}/").json()) for run in runs}
    assert [alone[run.id]["name"] for run in runs] == ["first", "second"]

    def answers(run_id: str) -> list[Any]:
        client = client_for(owner)
        try:
            return [timeless(client.get(f"/api/runs/{run_id}/").json()) for _ in range(15)]
        finally:
            connection.close()

    asked = [run.id for run in runs] * 3
    with ThreadPoolExecutor(len(asked)) as pool:
        for run_id, got in zip(asked, pool.map(answers, asked), strict=True):
            assert got == [alone[run_id]] * 15
