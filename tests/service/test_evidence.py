"""The evidence of the sizing prior: every key's default and its largest needs per process."""

from __future__ import annotations

import pytest
from django.db import connection

from harness.tasktypes import task_types
from runs.models import Observation
from runs.planning.evidence import TOP_NEEDS, aggregated_needs, prior_evidence, top_needs
from runs.planning.submission import (
    LATEST_OBSERVATIONS,
    LATEST_OWN_OBSERVATIONS,
    OBSERVATIONS_USED,
    latest_by_window,
    observed_peaks,
)

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


KEYS = 30


def seed_history(count: int) -> None:
    """``count`` observations of ``KEYS`` keys in one statement: clean and killed, of one to
    four processes, some without a peak, each a second after the last."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_observation (task_type, worker, attempt, processes, per_worker_gb, "
            "peak_bytes, limit_bytes, units, unit_seconds, cpu_seconds, oom, from_report, "
            "created_at, seconds) "
            f"SELECT 'key-' || (i %% {KEYS}), 'w' || i, 0, 1 + i %% 4, 1.0, "
            "CASE WHEN i %% 11 = 0 THEN NULL ELSE (i * 7919) %% 900000000 END, 2000000000 - i, "
            "0, 0, 0, i %% 7 = 0, true, timestamptz '2026-01-01' + i * interval '1 second', 0 "
            "FROM generate_series(1, %s) AS i",
            [count],
        )
        cursor.execute("ANALYZE runs_observation")


def expected_needs() -> dict[tuple[str, bool], float | None]:
    """Each key's and kill's top need per process, computed here from every observation."""
    needs: dict[tuple[str, bool], list[float]] = {}
    for o in Observation.objects.all():
        need = o.limit_bytes if o.oom else o.peak_bytes
        measured = needs.setdefault((o.task_type, o.oom), [])
        if need is not None:
            measured.append(need / o.processes)
    return {key: max(measured) if measured else None for key, measured in needs.items()}


def by_key(rows: list[tuple[str, bool, float | None]]) -> dict[tuple[str, bool], float | None]:
    return {(task_type, oom): top for task_type, oom, top in rows}


def test_the_top_needs_read_from_the_index_are_those_of_every_observation():
    seed_history(3000)
    observe("all-unmeasured", peak=None, processes=2)
    expected = expected_needs()
    assert len(expected) == 2 * KEYS + 1 and expected[("all-unmeasured", False)] is None
    assert by_key(top_needs()) == pytest.approx(expected)
    assert by_key(aggregated_needs()) == pytest.approx(expected)


def test_the_latest_observations_read_from_the_index_are_those_a_window_ranks():
    seed_history(3000)
    wanted = ["key-3", "key-17", "no-such-key"]
    by_index = list(Observation.objects.raw(LATEST_OBSERVATIONS, [sorted(wanted)]))
    by_window = list(latest_by_window(sorted(wanted)))
    assert [(o.task_type, o.pk) for o in by_index] == [(o.task_type, o.pk) for o in by_window]
    assert len(by_index) == 2 * OBSERVATIONS_USED
    peaks = observed_peaks(set(wanted))
    assert set(peaks) == {"key-3", "key-17"}
    assert all(a.at > b.at for a, b in zip(peaks["key-3"], peaks["key-3"][1:], strict=False))


def explained(sql: str, params: list | None = None) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_submissions_reads_of_a_long_history_use_indexes_not_a_scan():
    """At each submission: its cost must not grow with every observation ever made."""
    seed_history(100_000)
    plan = explained(TOP_NEEDS)
    assert "observation_need_idx" in plan and "Seq Scan" not in plan, plan
    plan = explained(LATEST_OBSERVATIONS, [["key-3", "key-17"]])
    assert "observation_type_idx" in plan and "Seq Scan" not in plan, plan


def test_an_owner_with_evidence_of_their_own_is_planned_from_it_alone(owner, stranger):
    from runs.models import Run

    alices, mallorys = (Run.objects.create(owner=u, spec={}) for u in (owner, stranger))
    for at, run, peak, oom in [(1, alices, 0.2, False), (2, mallorys, None, True),
                               (3, mallorys, None, True), (4, alices, 0.25, False)]:  # fmt: skip
        Observation.objects.create(
            task_type="command:relax.py", run=run, worker="w0", attempt=at, processes=1,
            per_worker_gb=10.0, limit_bytes=10 * GIB, oom=oom,
            peak_bytes=None if peak is None else int(peak * GIB),
        )  # fmt: skip

    alice = observed_peaks({"command:relax.py"}, owner.pk)["command:relax.py"]
    newcomer = observed_peaks({"command:relax.py"}, owner.pk + stranger.pk + 1)

    assert [(round(p.gb_per_process, 2), p.oom) for p in alice] == [(0.25, False), (0.2, False)]
    assert any(p.oom for p in newcomer["command:relax.py"]), "no evidence of one's own: everyone's"
    if connection.vendor == "postgresql":
        plan = explained(LATEST_OWN_OBSERVATIONS, [["command:relax.py"], owner.pk])
        assert "Seq Scan on runs_observation" not in plan, plan
