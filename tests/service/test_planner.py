"""The planner: pure functions from a task's spec, its type and observations to a TaskPlan."""

from __future__ import annotations

import re

import pytest

from harness.tasktypes import task_types
from runs.planning import sizing, sizing_base
from runs.planning.planner import (
    RETRY_FACTOR,
    ObservedPeak,
    TaskPlan,
    observation_key,
    plan_run,
    plan_task,
    processes,
    round_gb,
)
from runs.planning.spec import MemorySpec, RunSpec, TaskSpec

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


def peaks(*gbs: float, kill: float | None = None) -> list[ObservedPeak]:
    """Observations newest first, as a submission reads them; a kill newest when given."""
    found = [ObservedPeak(gb, at=float(i)) for i, gb in enumerate(gbs)]
    if kill is not None:
        found.append(ObservedPeak(kill, oom=True, at=float(len(gbs))))
    return found[::-1]


def test_observations_size_a_task_with_the_sizing_policy():
    observed = peaks(0.02, 0.03, 0.04, 0.05, 0.06)
    plan = plan_task(split(cores=1), SQUARES, observed)
    history = [sizing_base.Sample(o.gb_per_process, at=o.at) for o in reversed(observed)]
    expected = sizing.DEFAULT.size(history, default_gb=SQUARES.per_worker_gb)
    assert plan.per_worker_gb == max(0.05, round_gb(expected.gb))
    assert "5 observations of squares" in plan.why
    assert expected.why in plan.why


def test_one_kill_at_x_makes_the_next_plan_at_least_x_times_the_bump():
    killed = 0.25
    plan = plan_task(split(cores=1), SQUARES, peaks(kill=killed))
    assert plan.per_worker_gb >= killed * sizing.BUMP
    assert plan.retry_memory_gb >= plan.memory_gb * RETRY_FACTOR
    assert f"kill × {sizing.BUMP:g}" in plan.why


def test_a_kill_after_clean_peaks_raises_the_plan_above_the_killed_limit():
    clean = plan_task(split(cores=2), SQUARES, peaks(0.01, 0.012, 0.011))
    killed = plan_task(split(cores=2), SQUARES, peaks(0.01, 0.012, 0.011, kill=0.3))
    assert clean.per_worker_gb < 0.3
    assert killed.per_worker_gb >= 0.3 * sizing.BUMP
    assert re.search(r"3 (recent )?peaks", killed.why) and f"kill × {sizing.BUMP:g}" in killed.why
    assert killed.per_worker_gb <= round_gb(0.3 * sizing.BUMP * RETRY_FACTOR), killed.why


def test_a_floor_that_makes_the_plan_is_named():
    plan = plan_task(split(cores=1), SQUARES, peaks(0.001, 0.001, 0.001))
    assert plan.per_worker_gb == 0.05
    assert "floor 0.05" in plan.why


def test_the_why_of_the_memory_recomputes_to_the_plan():
    plan = plan_task(split(cores=3), SQUARES, peaks(0.2, 0.3, kill=0.4))
    found = re.search(r"memory ([\d.]+) \+ (\d+) × ([\d.]+) GiB = ([\d.]+) GiB", plan.why)
    assert found is not None, plan.why
    base, procs, per_worker, memory = map(float, found.groups())
    assert (base, procs, per_worker, memory) == (
        plan.base_gb,
        plan.processes,
        plan.per_worker_gb,
        plan.memory_gb,
    )
    assert round_gb(base + procs * per_worker) == memory
    retry = re.search(r"retry memory ([\d.]+) × ([\d.]+) GiB", plan.why)
    assert retry is not None, plan.why
    factor, of = map(float, retry.groups())
    assert of == plan.memory_gb
    assert round_gb(factor * of) == plan.retry_memory_gb


def test_the_retry_memory_is_at_least_a_factor_more():
    plan = plan_task(split(cores=3), SQUARES)
    assert plan.retry_memory_gb >= plan.memory_gb * RETRY_FACTOR - 1e-9
    assert f"retry memory {RETRY_FACTOR:g} × {plan.memory_gb:g} GiB" in plan.why


def test_a_command_task_learns_from_the_observations_of_its_key():
    spec = RunSpec.model_validate({"name": "post", "tasks": {"plot": {"command": ["plot"]}}})
    key = observation_key(task_type="", run_name="post", task_id="plot")
    assert key == "command:post/plot"
    plan = plan_run(spec, types={}, observed={key: peaks(kill=1.0)})["plot"]
    assert plan.memory_gb >= 1.0 * sizing.BUMP
    assert "observations of the command" in plan.why


def test_a_command_task_of_a_run_without_a_name_has_no_key():
    assert observation_key(task_type="", run_name="", task_id="plot") == ""
    assert observation_key(task_type="squares", run_name="", task_id="t") == "squares"


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
    became = (
        "workers: 5 became 1, as this backend runs a split task as one process whose 2 pool "
        "processes share its 2 cores (ask for more cores instead)"
    )
    assert became in plan.why and plan.why_short.endswith(f"; {became}.")


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


def test_a_type_without_observations_starts_from_the_prior_of_the_other_types():
    alloc = task_types()["alloc"]
    spec = RunSpec.model_validate(
        {"tasks": {"t": {"type": "alloc", "settings": {"units": 2, "mb": 1}}}}
    )
    lean = {f"type-{i}": (0.25, [sizing_base.Sample(0.01)]) for i in range(12)}
    plan = plan_run(spec, types=task_types(), evidence=lean)["t"]
    alone = plan_run(spec, types=task_types())["t"]
    assert alone.per_worker_gb == alloc.per_worker_gb
    assert plan.per_worker_gb < alloc.per_worker_gb
    assert "prior of 12 other types" in plan.why
    own = plan_run(spec, types=task_types(), evidence={"alloc": (0.25, [sizing_base.Sample(0.01)])})
    assert own["t"].per_worker_gb == alloc.per_worker_gb  # its own evidence is no prior


def test_a_plan_leads_with_one_plain_sentence_and_keeps_the_arithmetic():
    """A command with one earlier run: the sentence says the memory, the run, its peak and
    why the margin is wide; the arithmetic stays in ``why``."""
    command = TaskSpec(command=["python", "fit.py"])
    plan = plan_task(command, None, [ObservedPeak(0.09, at=1.0)])
    assert plan.why_short == (
        f"{plan.memory_gb:g} GiB: 1 earlier run of this command peaked at 0.09 GiB; "
        "with so few runs simrun keeps a wide margin, up to its default."
    )
    assert "p99.5 bound of 1 recent peak" in plan.why


def test_the_planner_hands_the_policy_only_its_window_of_observations():
    from runs.planning.planner import OBSERVATIONS_USED, history

    observed = [ObservedPeak(1.0, at=float(i)) for i in range(OBSERVATIONS_USED + 30)]
    kept = history(observed)
    assert len(kept) == OBSERVATIONS_USED == sizing.WINDOW
    assert kept[0].at == 30.0


def test_evidence_never_makes_a_plan_that_no_process_of_the_machine_fits():
    killed = [ObservedPeak(10.4, oom=True, at=float(i)) for i in range(5)]
    for task in (split(cores=4), TaskSpec(command=["sim"])):
        plan = plan_task(task, SQUARES if task.type else None, killed, max_memory_gb=8.0)
        assert plan.memory_gb <= 8.0
        assert plan.base_gb + plan.per_worker_gb <= 8.0, "one process fits"
        assert processes(plan.cores, plan.memory_gb, plan.base_gb, plan.per_worker_gb) >= 1
        assert "so that one process fits" in plan.why


def test_a_spec_that_sets_the_per_process_memory_is_not_capped_by_the_planner():
    plan = plan_task(
        split(memory=MemorySpec(per_worker_gb=9.0)), SQUARES, max_memory_gb=8.0, max_cores=4
    )
    assert plan.per_worker_gb == 9.0
