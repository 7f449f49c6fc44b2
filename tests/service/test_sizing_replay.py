"""bench/sizing_replay.py: every baseline on hand-made traces gives hand-computed figures."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
GIB = 2**30
HOUR_MS = 3_600_000


def load_replay():
    spec = importlib.util.spec_from_file_location(
        "sizing_replay", ROOT / "bench" / "sizing_replay.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["sizing_replay"] = module
    spec.loader.exec_module(module)
    return module


replay = load_replay()
HEADER = "process,status,submit,start,complete,realtime,memory,peak_rss"


def row(process: str, submit_s: float, peak_gb: float, static_gb: float, status="COMPLETED") -> str:
    """A task of one hour that starts when submitted."""
    submit = int(submit_s * 1000)
    memory, peak = int(static_gb * GIB), int(peak_gb * GIB)
    return f"{process},{status},{submit},{submit},{submit + HOUR_MS},{HOUR_MS},{memory},{peak}"


def run_json(capsys, *paths: Path, policy: str | None = None) -> dict:
    argv = [str(p) for p in paths] + ["--json"] + (["--policy", policy] if policy else [])
    assert replay.main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def trace_a(tmp_path):
    """Four one-hour tasks of type A at a static 4 GiB, each submitted 400 s after the last ended.

    Peaks 1.0, 1.5, 3.5, 1.0 GiB; plus three rows that cannot be replayed.
    """
    path = tmp_path / "a.csv"
    lines = [
        HEADER,
        row("A", 0, 1.0, 4),
        row("A", 4000, 1.5, 4),
        row("A", 8000, 3.5, 4),
        row("A", 12000, 1.0, 4),
        "A,FAILED,100,100,200,-,4294967296,-",
        "A,COMPLETED,100,100,100,0,4294967296,1000",
        f"A,COMPLETED,100,100,3600100,{HOUR_MS},4294967296,0",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_static_wastes_its_allocation_minus_the_peaks_and_is_never_killed(capsys, trace_a):
    figures = run_json(capsys, trace_a)["traces"]["a"]["static"]
    assert figures["over_gbh"] == pytest.approx(3 + 2.5 + 0.5 + 3)
    assert (figures["under_gbh"], figures["failed_tasks"], figures["retries_per_100"]) == (0, 0, 0)
    assert figures["used_gbh"] == pytest.approx(7.0)
    assert figures["maq"] == pytest.approx(7 / 16, abs=1e-4)


def test_max_seen_under_simruns_rules_fails_a_task_killed_twice(capsys, trace_a):
    """Task 2 at 1.0 is killed, its retry at 2.0 fits (0.5 over). Task 3 sees only task 1's peak
    and task 2's kill (its retry ends later): killed at 1.0 and at 2.0, failed. Task 4 sees the
    1.5 peak: 0.5 over."""
    figures = run_json(capsys, trace_a)["traces"]["a"]["max-seen"]
    assert figures["over_gbh"] == pytest.approx(3 + 0.5 + 0.5)
    assert figures["under_gbh"] == pytest.approx(1 + 1 + 2)
    assert figures["failed_tasks"] == 1
    assert figures["retries_per_100"] == pytest.approx(50.0)
    assert figures["rules"] == "one retry"


def test_doubling_with_unlimited_retries_doubles_until_the_task_fits(capsys, trace_a):
    """As max-seen, but task 3 goes on to 4.0 GiB and fits (0.5 over)."""
    figures = run_json(capsys, trace_a)["traces"]["a"]["doubling"]
    assert figures["over_gbh"] == pytest.approx(3 + 0.5 + 0.5 + 0.5)
    assert figures["under_gbh"] == pytest.approx(1 + 1 + 2)
    assert figures["failed_tasks"] == 0
    assert figures["retries_per_100"] == pytest.approx(75.0)
    assert figures["rules"] == "unlimited retries"


def test_vpa_sizes_p90_plus_15_percent_and_retries_at_the_recommenders_bump(capsys, tmp_path):
    """Task 2 sees one peak of 1.0: 1.15 GiB, killed (peak 1.3); the retry at
    max(1.15 + 100 MiB, 1.15 × 1.2) = 1.38 GiB fits, 0.08 over."""
    path = tmp_path / "b.csv"
    path.write_text("\n".join([HEADER, row("B", 0, 1.0, 2), row("B", 4000, 1.3, 2)]) + "\n")
    figures = run_json(capsys, path)["traces"]["b"]["vpa"]
    assert figures["over_gbh"] == pytest.approx(1.0 + 0.08, abs=1e-3)
    assert figures["under_gbh"] == pytest.approx(1.15, abs=1e-3)
    assert (figures["failed_tasks"], figures["retries_per_100"]) == (0, 50.0)


def test_rows_that_cannot_be_measured_are_skipped_counted_and_said(capsys, trace_a):
    result = run_json(capsys, trace_a)
    assert result["skipped"]["a"] == {
        "status FAILED": 1,
        "run time 0": 1,
        "peak 0": 1,
    }
    assert result["total"]["static"]["tasks"] == 4
    assert replay.main([str(trace_a)]) == 0
    out = capsys.readouterr().out
    assert "rows skipped: 1 status FAILED, 1 run time 0, 1 peak 0" in out
    assert "elapsed" in out


def test_one_policy_can_be_replayed_alone(capsys, trace_a):
    result = run_json(capsys, trace_a, policy="simrun")
    assert set(result["total"]) - {"best_baseline"} == {"simrun"}


def test_a_missing_trace_is_one_clear_sentence(capsys, tmp_path):
    assert replay.main([str(tmp_path / "nope.csv")]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'nope.csv'}: no such file."


@pytest.mark.skipif(not (TRACES / "nfcore-rnaseq.csv").is_file(), reason="shared traces absent")
def test_the_rnaseq_trace_replays_with_every_figure_and_simrun_fails_nothing(capsys):
    result = run_json(capsys, TRACES / "nfcore-rnaseq.csv")
    assert result["skipped"]["nfcore-rnaseq"] == {"run time 0": 102}
    figures = result["traces"]["nfcore-rnaseq"]
    columns = {"simrun", "static", "max-seen", "doubling", "vpa", "p95-1retry", "vpa-1retry"}
    assert set(figures) == {*columns, "input-blind", "oracle", "best_baseline"}
    keys = {"tasks", "used_gbh", "over_gbh", "under_gbh", "wasted_gbh", "maq"}
    keys |= {"retries_per_100", "failed_tasks", "rules", "gap_closed_percent"}
    keys |= {"no_history_tasks", "no_history_wasted_gbh", "no_history_retries"}
    for name, policy in figures.items():
        if name == "best_baseline":
            continue
        assert set(policy) == keys
        assert policy["tasks"] == 1206
    assert figures["simrun"]["failed_tasks"] == figures["input-blind"]["failed_tasks"] == 0
    assert figures["simrun"]["wasted_gbh"] < figures["static"]["wasted_gbh"]
    assert result["total"] == figures


def test_simrun_starts_a_new_type_from_the_types_that_ended_before_it_was_submitted(
    capsys, tmp_path
):
    """A and B peak at 0.1 of their 4 GiB and end at 3,600 s. C, submitted at 4,000 s, gets
    the prior of 2 types: 0.025 × 1.25 floored at 0.1, ^ (2/19 = 0.105) = 0.785 of 4 GiB =
    3.14 GiB, which the planner rounds up to 3.15 GiB (2.15 over). D, submitted at 1,000 s
    before any task ended, gets its 4 GiB."""
    path = tmp_path / "p.csv"
    lines = [HEADER, row("A", 0, 0.1, 4), row("B", 0, 0.1, 4)]
    lines += [row("C", 4000, 1.0, 4), row("D", 1000, 1.0, 4)]
    path.write_text("\n".join(lines) + "\n")
    result = run_json(capsys, path)["traces"]["p"]
    assert result["static"]["over_gbh"] == pytest.approx(3.9 + 3.9 + 3 + 3)
    assert result["simrun"]["over_gbh"] == pytest.approx(3.9 + 3.9 + 2.15 + 3, abs=1e-3)
    assert result["simrun"]["retries_per_100"] == 0


def test_a_miss_of_the_prior_costs_one_attempt_and_retries_at_twice_the_default(capsys, tmp_path):
    """As above, but C peaks at 3.5 GiB: killed at 3.15 GiB (3.15 under), its retry at 2 × 4
    GiB fits (4.5 over); the task does not fail."""
    path = tmp_path / "q.csv"
    lines = [HEADER, row("A", 0, 0.1, 4), row("B", 0, 0.1, 4), row("C", 4000, 3.5, 4)]
    path.write_text("\n".join(lines) + "\n")
    simrun = run_json(capsys, path, policy="simrun")["traces"]["q"]["simrun"]
    assert simrun["under_gbh"] == pytest.approx(3.15, abs=1e-3)
    assert simrun["over_gbh"] == pytest.approx(3.9 + 3.9 + 4.5, abs=1e-3)
    assert (simrun["failed_tasks"], simrun["retries_per_100"]) == (
        0,
        pytest.approx(100 / 3, abs=1e-3),
    )


@pytest.fixture
def trace_two(tmp_path):
    """Two one-hour tasks of type A at a static 4 GiB, peaks 1.0 then 1.5 GiB; the second is
    submitted after the first ended."""
    path = tmp_path / "two.csv"
    path.write_text("\n".join([HEADER, row("A", 0, 1.0, 4), row("A", 4000, 1.5, 4)]) + "\n")
    return path


def test_p95_1retry_on_a_tiny_trace_gives_the_hand_computed_figures(capsys, trace_two):
    """First at the default 4 (3.0 over); second at p95 of [1.0] × 1.25 = 1.25 < 1.5: killed
    (1.25 under), retried at 2.5 (1.0 over)."""
    figures = run_json(capsys, trace_two, policy="p95-1retry")["total"]["p95-1retry"]
    assert figures["over_gbh"] == pytest.approx(4.0)
    assert figures["under_gbh"] == pytest.approx(1.25)
    assert (figures["failed_tasks"], figures["retries_per_100"]) == (0, 50.0)


def test_vpa_1retry_on_a_tiny_trace_gives_the_hand_computed_figures(capsys, trace_two):
    """First at the default 4 (3.0 over); second at p90 of [1.0] × 1.15 = 1.15 < 1.5: killed
    (1.15 under), retried at max(1.15 + 100 MiB, 1.15 × 1.2) = 1.38, killed again (1.38
    under): under simrun's one-retry rule the task fails."""
    figures = run_json(capsys, trace_two, policy="vpa-1retry")["total"]["vpa-1retry"]
    assert figures["over_gbh"] == pytest.approx(3.0)
    assert figures["under_gbh"] == pytest.approx(1.15 + 1.38)
    assert (figures["failed_tasks"], figures["retries_per_100"]) == (1, 50.0)


def test_the_oracle_wastes_only_the_first_task_of_each_types_over_allocation(capsys, trace_a):
    """trace_a's first task peaks at 1.0 of its 4 GiB: the oracle wastes those 3 GiB·h and
    nothing else, with no kill; every policy's gap to it is shown."""
    result = run_json(capsys, trace_a)["total"]
    oracle = result["oracle"]
    assert (oracle["over_gbh"], oracle["under_gbh"]) == (pytest.approx(3.0), 0)
    assert (oracle["failed_tasks"], oracle["retries_per_100"]) == (0, 0)
    best = result["best_baseline"]
    assert result[best]["gap_closed_percent"] == 0
    assert set(result) >= {"p95-1retry", "vpa-1retry", "oracle", "simrun"}


def test_the_replay_and_the_planner_give_the_same_allocation_for_the_same_history(capsys, tmp_path):
    """A's first task (2 GiB default) peaks at 2.5 GiB: killed at 2 GiB, it passes on its retry.
    Then 130 tasks end one after the other (peaks 0.3 to 0.59 GiB), so the kill is older than
    the newest observations the product reads, and one more task needs 1.9 GiB: killed, then
    retried. What the replay gives that task and its retry (its under-allocation, and its
    retry's over-allocation + its peak, in a one-hour task) is what the product's planner
    plans from the same observations: the newest ``OBSERVATIONS_USED`` as the submission reads
    them (the kill no longer among them) and the type's largest need of all time, the kill,
    which the retry never goes below."""
    from harness.tasktypes import TaskType
    from runs.planning.planner import OBSERVATIONS_USED, ObservedPeak, plan_run
    from runs.planning.spec import RunSpec

    peaks = [0.3 + 0.01 * (i % 30) for i in range(130)]
    assert len(peaks) > OBSERVATIONS_USED
    lines = [HEADER, row("A", 0, 2.5, 2)]
    lines += [row("A", 8000 + 4000 * i, gb, 2) for i, gb in enumerate(peaks)]
    before = tmp_path / "before.csv"
    before.write_text("\n".join(lines) + "\n")
    after = tmp_path / "after.csv"
    after.write_text("\n".join([*lines, row("A", 8000 + 4000 * len(peaks), 1.9, 2)]) + "\n")
    was = run_json(capsys, before, policy="simrun")["total"]["simrun"]
    now = run_json(capsys, after, policy="simrun")["total"]["simrun"]
    assert now["retries_per_100"] * now["tasks"] == pytest.approx(200, abs=0.1)  # 1st, last
    replayed_gb = now["under_gbh"] - was["under_gbh"]
    replayed_retry_gb = now["over_gbh"] - was["over_gbh"] + 1.9

    observed = [ObservedPeak(2.0, oom=True, at=3600.0), ObservedPeak(2.5, at=7200.0)]
    observed += [ObservedPeak(gb, at=8000.0 + 4000 * i + 3600) for i, gb in enumerate(peaks)]
    newest = sorted(observed, key=lambda o: -o.at)[:OBSERVATIONS_USED]
    a_type = TaskType(
        name="A",
        settings=RunSpec,  # any model: the planner never reads the settings
        command=lambda _: ["true"],
        base_gb=0.0,
        per_worker_gb=2.0,
    )
    spec = RunSpec.model_validate({"tasks": {"t": {"type": "A"}}})
    plan = plan_run(
        spec,
        types={"A": a_type},
        observed={"A": newest},
        evidence={"A": (2.0, [replay.Sample(2.0, killed=True)])},
    )["t"]
    assert plan.memory_gb < 1.9 < plan.retry_memory_gb
    assert replayed_gb == pytest.approx(plan.memory_gb, abs=1e-6)
    assert replayed_retry_gb == pytest.approx(plan.retry_memory_gb, abs=1e-6)
    assert plan.retry_memory_gb >= 2.0 * 1.3 * 1.25  # the kill, out of the window, still counts


def test_the_replay_plans_with_the_features_the_planner_is_given(capsys, tmp_path):
    """The trace's rchar stands for the input's size: 40 tasks of A whose peaks are 0.5 GiB +
    1 GiB per GB read, then one reading 3 GB. What the replay gives it (its over-allocation
    + its peak, in a one-hour task it fits) is what the product's planner plans from the same
    observations with the same features, and not what it plans blind to the input."""
    from harness.tasktypes import TaskType
    from runs.planning.planner import ObservedPeak, plan_task
    from runs.planning.spec import RunSpec, TaskSpec

    header = HEADER + ",rchar"
    reads = [0.5e9 + 2.0e9 * ((i * 17) % 40) / 39 for i in range(40)]
    lines = [header] + [
        row("A", 4000 * i, 0.5 + b / 1e9, 8) + f",{int(b)}" for i, b in enumerate(reads)
    ]
    before = tmp_path / "before.csv"
    before.write_text("\n".join(lines) + "\n")
    after = tmp_path / "after.csv"
    last = row("A", 4000 * len(reads), 3.5, 8) + f",{int(3e9)}"
    after.write_text("\n".join([*lines, last]) + "\n")
    was = run_json(capsys, before, policy="simrun")["total"]["simrun"]
    now = run_json(capsys, after, policy="simrun")["total"]["simrun"]
    assert now["retries_per_100"] == was["retries_per_100"] == 0
    replayed_gb = now["over_gbh"] - was["over_gbh"] + 3.5

    def features(b: float) -> tuple[tuple[str, float], ...]:
        return (("cores", 1.0), ("input_bytes", float(int(b))))

    observed = [
        ObservedPeak(int((0.5 + b / 1e9) * GIB) / GIB, at=4000.0 * i + 3600, features=features(b))
        for i, b in enumerate(reads)
    ][::-1]
    a_type = TaskType(
        name="A", settings=RunSpec, command=lambda _: ["true"], base_gb=0.0, per_worker_gb=8.0
    )
    spec = TaskSpec.model_construct(type="A")
    plan = plan_task(spec, a_type, observed, features=features(3e9), counterfactual=False)
    blind = plan_task(spec, a_type, observed, features=(("cores", 1.0),), counterfactual=False)
    assert replayed_gb == pytest.approx(plan.memory_gb, abs=1e-6)
    assert plan.memory_gb != blind.memory_gb
    assert "follow `input_bytes`" in plan.why_short


def test_the_first_tasks_replay_counts_only_the_tasks_planned_without_history(tmp_path):
    """A's first task (no prior yet: its default 4 GiB, peak 1) wastes 3 GiB·h; A's second,
    with history, is given its peak and costs nothing; B, submitted after A ended, starts
    from the prior A gives, below its default, as the product plans it."""
    from bench import first_tasks

    path = tmp_path / "t.csv"
    lines = [HEADER, row("A", 0, 1.0, 4), row("A", 4000, 3.0, 4), row("B", 4000, 2.0, 4)]
    path.write_text("\n".join(lines) + "\n")
    tasks, _ = first_tasks.replay.read_trace(path)

    shipped = first_tasks.figures_at(first_tasks.SHIPPED, tasks)

    assert (shipped.tasks, shipped.unseen_tasks, shipped.retries, shipped.failed) == (3, 2, 0, 0)
    b_over = shipped.wastage.over_gbh - 3.0
    assert 0 < b_over < 4.0 - 2.0
    assert shipped.unseen.wasted_gbh == pytest.approx(shipped.wastage.wasted_gbh)


def test_the_first_tasks_cross_validation_needs_two_traces(capsys, trace_a):
    assert replay.main([str(trace_a), "--first-tasks"]) == 2
    assert "two traces at least" in capsys.readouterr().err


def test_the_first_tasks_choice_takes_fewer_retries_over_less_waste():
    """Both points keep their retries under the budget on the traces fitted, but the one that
    lowers the prior retries more there: on a trace whose first waves are most of its tasks
    (rnaseq) that is the point that breaks the target, so the one with fewer retries wins."""
    from bench import first_tasks

    def first(wasted, retries):
        return replay.Figures(
            tasks=1000,
            retries=retries,
            unseen=replay.Wastage(over_gbh=wasted),
            wastage=replay.Wastage(over_gbh=wasted),
        )

    defaults = {s: first(100.0, 0) for s in ("a", "b")}
    lower = first_tasks.Scored((1.0, 6, 0.1), {"a": first(40.0, 5), "b": first(40.0, 0)})
    kept = first_tasks.Scored((1.25, 12, 0.25), {"a": first(60.0, 0), "b": first(60.0, 0)})

    assert first_tasks.choose([lower, kept], ["a", "b"], defaults) is kept


def test_the_json_says_the_tasks_without_history_apart(capsys, trace_a):
    """A's first task is planned without history (its 4 GiB default, peak 1: 3 GiB·h over);
    the three after it have history."""
    static = run_json(capsys, trace_a)["traces"]["a"]["static"]
    assert (static["no_history_tasks"], static["no_history_retries"]) == (1, 0)
    assert static["no_history_wasted_gbh"] == pytest.approx(3.0)
