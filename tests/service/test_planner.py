"""The planner: pure functions from a task's spec, its type and observations to a TaskPlan."""

from __future__ import annotations

import pytest

from harness.tasktypes import task_types
from runs.planner import (
    MARGIN,
    MIN_OBSERVATIONS,
    RETRY_FACTOR,
    ObservedPeak,
    TaskPlan,
    plan_task,
    processes,
    quantile,
    round_gb,
)
from runs.spec import MemorySpec, TaskSpec

SQUARES = task_types()["squares"]
CSV_STATS = task_types()["csv-stats"]


def split(**fields) -> TaskSpec:
    return TaskSpec(type="squares", settings={"n": 10}, **fields)


def test_the_types_defaults_size_a_task_without_observations():
    plan = plan_task(split(cores=4), SQUARES)
    assert plan.per_worker_gb == SQUARES.per_worker_gb
    assert plan.base_gb == SQUARES.base_gb
    assert plan.processes == 4
    assert plan.memory_gb == pytest.approx(SQUARES.base_gb + 4 * SQUARES.per_worker_gb)
    assert "default of squares" in plan.why


def test_the_spec_overrides_the_per_worker_and_base_memory():
    plan = plan_task(
        split(cores=2, memory=MemorySpec(per_worker_gb=0.5, base_gb=0.25)),
        SQUARES,
        [ObservedPeak(9.0)] * 10,
    )
    assert (plan.per_worker_gb, plan.base_gb) == (0.5, 0.25)
    assert plan.memory_gb == pytest.approx(1.25)
    assert "from the spec" in plan.why


def test_observations_give_a_high_quantile_with_a_margin():
    peaks = [ObservedPeak(gb) for gb in (0.2, 0.3, 0.4, 0.5, 1.0)]
    plan = plan_task(split(cores=1), SQUARES, peaks)
    expected = round_gb(quantile([0.2, 0.3, 0.4, 0.5, 1.0], 0.95) * MARGIN)
    assert plan.per_worker_gb == pytest.approx(expected)
    assert plan.per_worker_gb > 0.9 * MARGIN
    assert "5 observations of squares" in plan.why
    assert "p95" in plan.why and f"{MARGIN} margin" in plan.why


def test_too_few_observations_keep_the_default_and_say_so():
    peaks = [ObservedPeak(3.0)] * (MIN_OBSERVATIONS - 1)
    plan = plan_task(split(), SQUARES, peaks)
    assert plan.per_worker_gb == SQUARES.per_worker_gb
    assert f"{MIN_OBSERVATIONS - 1} observations, {MIN_OBSERVATIONS} needed" in plan.why


def test_oom_kills_are_not_peaks_but_raise_the_retry_memory():
    peaks = [ObservedPeak(0.1)] * 5 + [ObservedPeak(2.0, oom=True)]
    plan = plan_task(split(cores=2), SQUARES, peaks)
    assert plan.per_worker_gb < 0.2
    assert plan.retry_memory_gb == pytest.approx(round_gb(plan.base_gb + 2 * 2.0 * RETRY_FACTOR))
    assert "OOM kills" in plan.why


def test_the_retry_memory_is_at_least_a_factor_more():
    plan = plan_task(split(cores=3), SQUARES)
    assert plan.retry_memory_gb >= plan.memory_gb * RETRY_FACTOR - 1e-9
    assert f"{RETRY_FACTOR}× the memory" in plan.why


def test_a_total_memory_from_the_spec_limits_the_processes():
    plan = plan_task(
        split(cores=8, memory=MemorySpec(gb=1.0, base_gb=0.2, per_worker_gb=0.3)), SQUARES
    )
    assert plan.memory_gb == 1.0
    assert plan.processes == 2  # floor((1.0 - 0.2) / 0.3)


def test_a_backend_without_extra_workers_plans_one_pod_that_merges():
    plan = plan_task(split(workers=5), SQUARES, extra_workers=False)
    assert plan.workers == 1
    assert plan.coordinator_merges is True
    assert "5 workers asked" in plan.why


def test_a_backend_with_extra_workers_keeps_them_and_a_merge_pod():
    plan = plan_task(split(workers=5), SQUARES, extra_workers=True)
    assert plan.workers == 5
    assert plan.coordinator_merges is False


def test_cores_and_memory_are_capped_by_the_largest_node():
    plan = plan_task(split(cores=64), SQUARES, max_cores=2, max_memory_gb=0.25)
    assert plan.cores == 2
    assert plan.memory_gb == 0.25
    assert plan.processes == 1
    assert plan.retry_memory_gb <= 0.25
    assert "largest node" in plan.why


def test_a_plugin_task_runs_one_process_and_never_merges():
    plan = plan_task(TaskSpec(type="csv-stats", cores=4), CSV_STATS, extra_workers=False)
    assert plan.processes == 1
    assert plan.workers == 1
    assert plan.coordinator_merges is False
    assert plan.memory_gb == pytest.approx(round_gb(CSV_STATS.base_gb + CSV_STATS.per_worker_gb))


def test_a_command_task_gets_the_command_default_or_its_spec_memory():
    assert plan_task(TaskSpec(command=["ls"]), None).memory_gb == 1.0
    plan = plan_task(TaskSpec(command=["ls"], memory=MemorySpec(gb=3.0)), None)
    assert plan.memory_gb == 3.0 and plan.cores == 1


def test_a_plan_written_before_coordinator_merges_existed_reads_false():
    stored = plan_task(split(), SQUARES).model_dump()
    del stored["coordinator_merges"]
    assert TaskPlan.model_validate(stored).coordinator_merges is False


@pytest.mark.parametrize(
    ("cores", "memory", "base", "per_worker", "expected"),
    [
        (4, None, 0.5, 1.0, 4),  # no limit: the cores
        (4, 10.0, 0.5, 1.0, 4),  # memory for more than the cores
        (4, 2.5, 0.5, 1.0, 2),  # memory for two
        (4, 1.0, 0.5, 1.0, 1),  # not even one fits: still one
        (4, 3.0, 1.0, 1.0, 2),  # exactly two fit (no float rounding down)
        (1, 100.0, 0.0, 0.1, 1),
        (0, None, 0.0, 1.0, 1),  # at least one
    ],
)
def test_processes_is_the_harness_formula(cores, memory, base, per_worker, expected):
    assert processes(cores, memory, base, per_worker) == expected


def test_memory_rounds_up_to_its_step():
    assert round_gb(0.30000000000000004) == 0.3
    assert round_gb(0.31) == 0.35
    assert round_gb(1.0) == 1.0
