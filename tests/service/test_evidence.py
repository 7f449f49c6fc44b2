"""The evidence of the sizing prior: every key's default and its largest needs per process."""

from __future__ import annotations

import pytest

from harness.tasktypes import task_types
from runs.evidence import prior_evidence
from runs.models import Observation

pytestmark = pytest.mark.django_db

GIB = 2**30


def observe(key: str, *, peak: float | None = None, limit: float = 1.0, processes: int = 1,
            oom: bool = False) -> None:  # fmt: skip
    Observation.objects.create(
        task_type=key,
        worker="w0",
        attempt=Observation.objects.filter(task_type=key).count(),
        processes=processes,
        per_worker_gb=limit,
        peak_bytes=None if peak is None else int(peak * GIB),
        limit_bytes=int(limit * GIB),
        oom=oom,
    )


def test_each_key_gives_its_default_its_top_peak_and_its_top_kill_per_process(
    django_assert_max_num_queries,
):
    observe("squares", peak=0.2, processes=2)
    observe("squares", peak=0.6, processes=2)
    observe("squares", limit=1.0, processes=2, oom=True)
    observe("command:post/plot", peak=0.3)
    observe("gone-type", peak=5.0)
    with django_assert_max_num_queries(1):
        found = prior_evidence(task_types())
    assert set(found) == {"squares", "command:post/plot"}
    default, samples = found["squares"]
    assert default == task_types()["squares"].per_worker_gb
    assert sorted((s.killed, round(s.gb, 3)) for s in samples) == [(False, 0.3), (True, 0.5)]
    assert found["command:post/plot"][0] == 1.0
