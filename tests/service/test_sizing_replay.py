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
    assert set(result["total"]) == {"simrun"}


def test_a_missing_trace_is_one_clear_sentence(capsys, tmp_path):
    assert replay.main([str(tmp_path / "nope.csv")]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'nope.csv'}: no such file."


@pytest.mark.skipif(not (TRACES / "nfcore-rnaseq.csv").is_file(), reason="shared traces absent")
def test_the_rnaseq_trace_replays_with_every_figure_and_simrun_fails_nothing(capsys):
    result = run_json(capsys, TRACES / "nfcore-rnaseq.csv")
    assert result["skipped"]["nfcore-rnaseq"] == {"run time 0": 102}
    figures = result["traces"]["nfcore-rnaseq"]
    assert set(figures) == {"simrun", "static", "max-seen", "doubling", "vpa"}
    keys = {"tasks", "used_gbh", "over_gbh", "under_gbh", "wasted_gbh", "maq"}
    keys |= {"retries_per_100", "failed_tasks", "rules"}
    for policy in figures.values():
        assert set(policy) == keys
        assert policy["tasks"] == 1206
    assert figures["simrun"]["failed_tasks"] == 0
    assert figures["simrun"]["wasted_gbh"] < figures["static"]["wasted_gbh"]
    assert result["total"] == figures


def test_simrun_starts_a_new_type_from_the_types_that_ended_before_it_was_submitted(
    capsys, tmp_path
):
    """A and B peak at 0.1 of their 4 GiB and end at 3,600 s. C, submitted at 4,000 s, gets
    the prior of 2 types: 0.025 × 1.5 floored at 0.25, ^ (2/14 = 0.143) = 0.82 of 4 GiB =
    3.28 GiB (2.28 over). D, submitted at 1,000 s before any task ended, gets its 4 GiB."""
    path = tmp_path / "p.csv"
    lines = [HEADER, row("A", 0, 0.1, 4), row("B", 0, 0.1, 4)]
    lines += [row("C", 4000, 1.0, 4), row("D", 1000, 1.0, 4)]
    path.write_text("\n".join(lines) + "\n")
    result = run_json(capsys, path)["traces"]["p"]
    assert result["static"]["over_gbh"] == pytest.approx(3.9 + 3.9 + 3 + 3)
    assert result["simrun"]["over_gbh"] == pytest.approx(3.9 + 3.9 + 2.28 + 3, abs=1e-3)
    assert result["simrun"]["retries_per_100"] == 0


def test_a_miss_of_the_prior_costs_one_attempt_and_retries_at_twice_the_default(capsys, tmp_path):
    """As above, but C peaks at 3.5 GiB: killed at 3.28 GiB (3.28 under), its retry at 2 × 4
    GiB fits (4.5 over); the task does not fail."""
    path = tmp_path / "q.csv"
    lines = [HEADER, row("A", 0, 0.1, 4), row("B", 0, 0.1, 4), row("C", 4000, 3.5, 4)]
    path.write_text("\n".join(lines) + "\n")
    simrun = run_json(capsys, path, policy="simrun")["traces"]["q"]["simrun"]
    assert simrun["under_gbh"] == pytest.approx(3.28, abs=1e-3)
    assert simrun["over_gbh"] == pytest.approx(3.9 + 3.9 + 4.5, abs=1e-3)
    assert (simrun["failed_tasks"], simrun["retries_per_100"]) == (
        0,
        pytest.approx(100 / 3, abs=1e-3),
    )
