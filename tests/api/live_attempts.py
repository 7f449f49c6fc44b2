"""A run with a worker running (its live memory samples in the store) and one that ended."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.utils import timezone

from runs.common import store
from runs.models import Attempt, Run

MIB = 2**20
SAMPLES = [200 * MIB, 600 * MIB, 400 * MIB]


def with_live_attempts(run: Run) -> tuple[Attempt, Attempt]:
    """``sweep-w0`` ran 90 s and peaked at 700 MiB (recorded); ``sweep-w1`` runs since 65 s,
    its live samples peaking at 600 MiB so far."""
    sweep = run.tasks.get(task_id="sweep")
    now = timezone.now()
    ended = Attempt.objects.create(
        task=sweep, worker="sweep-w0", attempt=0, phase="Succeeded", exit_code=0,
        node_name="node-a", memory_gb=1.5, peak_bytes=700 * MIB,
        started_at=now - timedelta(seconds=100), ended_at=now - timedelta(seconds=10),
    )  # fmt: skip
    live = Attempt.objects.create(
        task=sweep, worker="sweep-w1", attempt=0, phase="Running", node_name="node-b",
        memory_gb=1.5, started_at=now - timedelta(seconds=65),
    )  # fmt: skip
    folder = store.task_dir(run.id, "sweep") / "live"
    folder.mkdir(parents=True, exist_ok=True)
    epoch = now.timestamp()
    body: dict[str, Any] = {
        "samples": [[epoch - 3 + i, b] for i, b in enumerate(SAMPLES)],
        "peak_bytes": max(SAMPLES),
        "updated": epoch,
    }
    (folder / "sweep-w1-0.json").write_text(json.dumps(body))
    return ended, live
