"""Sizing policies: pure functions from a task type's history to the first and retry memory."""

from __future__ import annotations

import math
import re

import pytest

from runs.planning.sizing import (
    BUMP,
    DEFAULT,
    MIN_GB,
    MIN_MARGIN,
    POLICIES,
    PRIOR_FLOOR,
    RETRY_FACTOR,
    Simrun,
    prior_from,
    wastage,
)
from runs.planning.sizing_base import MIB, Prior, Sample

PRODUCT = re.compile(r"(\d+\.\d+) GiB × (\d+(?:\.\d+)?)[^=;]*= (\d+\.\d+) GiB")
RETRY = re.compile(
    r"retry (\d+\.\d+) GiB, the largest of (\d+(?:\.\d+)?) × (\d+\.\d+) GiB, the default "
    r"(\d+\.\d+) GiB and the largest need shown (\d+\.\d+) GiB × (\d+(?:\.\d+)?)"
)
RESULT = re.compile(r"→ (\d+\.\d+) GiB")


def peaks(*gbs: float) -> list[Sample]:
    return [Sample(gb, at=float(i)) for i, gb in enumerate(gbs)]


def ceil_mib(gb: float) -> float:
    return math.ceil(round(gb * 1000, 6)) / 1000


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_sizes_a_type_without_history_at_its_default(name):
    sizing = POLICIES[name].size([], default_gb=3.0)
    assert sizing.gb == 3.0
    assert sizing.retry_gb > 3.0


def test_the_default_policy_is_simruns():
    assert DEFAULT.name == "simrun"
    assert set(POLICIES) == {"simrun", "static", "max-seen", "doubling", "vpa", "p95-1retry"}


def test_one_kill_raises_the_next_allocation_and_the_retry_at_once():
    sizing = DEFAULT.size([Sample(0.25, killed=True)], default_gb=0.25)
    assert sizing.gb >= 0.25 * BUMP
    assert sizing.retry_gb >= sizing.gb * RETRY_FACTOR
    assert "1 recent kill" in sizing.why and f"× {BUMP:g}" in sizing.why


def test_a_kill_above_clean_peaks_floors_the_allocation_at_the_kill_times_the_bump():
    clean = peaks(*[1.0, 1.02, 0.98, 1.01] * 5)
    alone = DEFAULT.size(clean, default_gb=4.0)
    killed_at = alone.gb
    combined = DEFAULT.size([*clean, Sample(killed_at, killed=True, at=30.0)], default_gb=4.0)
    assert combined.gb >= killed_at * BUMP
    assert combined.gb > alone.gb
    assert "20 recent peaks and 1 recent kill" in combined.why


def test_kills_and_peaks_are_one_model_a_recent_kill_below_the_peaks_lowers_nothing():
    clean = peaks(*[1.0, 1.02, 0.98, 1.01] * 5)
    alone = DEFAULT.size(clean, default_gb=4.0)
    combined = DEFAULT.size([*clean, Sample(0.5, killed=True, at=30.0)], default_gb=4.0)
    assert combined.gb >= max(s.gb for s in clean)
    assert combined.gb >= alone.gb * 0.95


def test_without_a_kill_the_allocation_never_exceeds_the_default():
    sizing = DEFAULT.size(peaks(0.9), default_gb=1.0)
    assert sizing.gb == 1.0
    assert "capped at the default" in sizing.why


def test_few_peaks_get_a_wider_margin_than_many_of_the_same_spread():
    few = DEFAULT.size(peaks(1.0, 1.05, 0.95), default_gb=100.0)
    many = DEFAULT.size(peaks(*[1.0, 1.05, 0.95] * 10), default_gb=100.0)
    assert few.gb > many.gb > 1.05


def test_a_wider_spread_gets_a_wider_margin():
    tight = DEFAULT.size(peaks(*[1.0, 1.01, 0.99] * 10), default_gb=100.0)
    loose = DEFAULT.size(peaks(*[1.0, 1.3, 0.7] * 10), default_gb=100.0)
    assert loose.gb > tight.gb * 1.25


def test_tiny_peaks_are_floored():
    assert DEFAULT.size(peaks(*[0.001] * 20), default_gb=1.0).gb == MIN_GB


def test_a_peak_measured_as_zero_sizes_at_the_floor_instead_of_failing():
    assert DEFAULT.size(peaks(0.0, 0.0, 0.0), default_gb=1.0).gb == MIN_GB


def test_a_type_whose_peaks_step_up_recovers_within_a_few_tasks_without_a_second_kill():
    """40 tasks near 1 GiB, then a new input size near 1.6 GiB; each task ends before the next."""
    history: list[Sample] = []
    kills_after_step = []
    for i in range(60):
        peak = (1.0 if i < 40 else 1.6) * (1 + 0.02 * ((i * 7) % 5 - 2) / 2)
        sizing = DEFAULT.size(history, default_gb=8.0)
        if sizing.gb < peak:
            assert sizing.retry_gb >= peak, f"task {i} killed twice"
            history.append(Sample(sizing.gb, killed=True, at=2.0 * i))
            if i >= 40:
                kills_after_step.append(i)
        history.append(Sample(peak, at=2.0 * i + 1))
    assert len(kills_after_step) <= 2
    assert all(i < 43 for i in kills_after_step)


@pytest.mark.parametrize(
    "history",
    [
        peaks(*[0.4, 0.41, 0.39, 0.42] * 3),
        [*peaks(*[0.4, 0.41, 0.39, 0.42] * 3), Sample(0.4, killed=True, at=20.0)],
        [Sample(0.4, killed=True)],
        peaks(0.3),
        peaks(*[0.5 + 0.001 * i for i in range(60)]),
        peaks(*[0.001] * 5),
    ],
    ids=["peaks", "peaks-and-a-kill", "a-kill", "one-peak-capped", "many-peaks-capped", "floor"],
)
def test_the_why_is_arithmetic_whose_numbers_recompute_to_the_sizing(history):
    sizing = DEFAULT.size(history, default_gb=1.0)
    products = PRODUCT.findall(sizing.why)
    assert products, sizing.why
    for a, b, result in products:
        assert float(result) == pytest.approx(ceil_mib(float(a) * float(b)), abs=1e-9), sizing.why
    ((retry, factor, gb, default, top, margin),) = RETRY.findall(sizing.why)
    assert float(gb) == sizing.gb and float(retry) == sizing.retry_gb
    largest = max(float(factor) * float(gb), float(default), float(top) * float(margin))
    assert float(retry) == pytest.approx(ceil_mib(largest), abs=1e-9)
    assert [float(x) for x in RESULT.findall(sizing.why)] == [sizing.gb]


def test_the_margin_in_the_why_is_the_bound_of_its_believed_spread_and_leverage():
    sizing = DEFAULT.size(peaks(*[0.4, 0.45, 0.35, 0.5] * 5), default_gb=10.0)
    found = re.search(
        r"× (\d+\.\d+) margin \(exp of (\d+\.\d+) × spread (\d+\.\d+) × √\(1 \+ (\d+\.\d+)\)",
        sizing.why,
    )
    assert found, sizing.why
    margin, z, spread, leverage = map(float, found.groups())
    assert margin == pytest.approx(math.exp(z * spread * math.sqrt(1 + leverage)), rel=0.01)


def test_static_keeps_its_allocation_and_doubles_on_a_kill():
    static = POLICIES["static"]
    sizing = static.size(peaks(0.5, 0.6), default_gb=2.0)
    assert (sizing.gb, sizing.retry_gb) == (2.0, 4.0)


def test_max_seen_takes_the_largest_clean_peak_and_doubles_on_a_kill():
    max_seen = POLICIES["max-seen"]
    sizing = max_seen.size([*peaks(0.5, 0.7, 0.6), Sample(0.9, killed=True)], default_gb=2.0)
    assert (sizing.gb, sizing.retry_gb) == (0.7, 1.4)
    assert POLICIES["doubling"].retry([], killed_gb=1.4, default_gb=2.0) == 2.8


def test_vpa_takes_p90_plus_15_percent_and_bumps_a_kill_as_the_recommender_does():
    vpa = POLICIES["vpa"]
    sizing = vpa.size(peaks(*[1.0] * 19, 2.0), default_gb=8.0)
    assert sizing.gb == pytest.approx(1.15)
    assert vpa.retry([], killed_gb=1.0, default_gb=8.0) == pytest.approx(1.2)
    assert vpa.retry([], killed_gb=0.1, default_gb=8.0) == pytest.approx(0.1 + 100 * MIB)
    assert vpa.size(peaks(0.01), default_gb=8.0).gb == pytest.approx(250 * MIB)
    killed = vpa.size([Sample(1.0, killed=True)], default_gb=8.0)
    assert killed.gb == pytest.approx(1.2 * 1.15)


def test_wastage_counts_used_over_and_under_sized_gib_hours():
    ok = wastage(peak_gb=1.0, limit_gb=3.0, seconds=1800, killed=False)
    assert (ok.used_gbh, ok.over_gbh, ok.under_gbh) == (0.5, 1.0, 0.0)
    killed = wastage(peak_gb=5.0, limit_gb=3.0, seconds=3600, killed=True)
    assert (killed.used_gbh, killed.over_gbh, killed.under_gbh) == (0.0, 0.0, 3.0)
    total = ok + killed
    assert total.wasted_gbh == 4.0
    assert total.maq == pytest.approx(0.5 / 4.5)


def test_tiny_peaks_then_a_kill_size_near_the_kill_not_by_the_spread_between_them():
    history = [Sample(0.010, at=1), Sample(0.012, at=2), Sample(0.011, at=3)]
    history.append(Sample(0.25, killed=True, at=4))
    sized = DEFAULT.size(history, default_gb=0.25)
    floor = math.ceil(0.25 * BUMP * 1000) / 1000
    assert floor <= sized.gb <= floor * RETRY_FACTOR + 1e-9
    assert "capped at 2 × the floor" in sized.why


def lean_types(count: int, share: float, default_gb: float = 4.0) -> Prior:
    """The prior of ``count`` other types whose peaks used ``share`` of their default."""
    return prior_from(
        {
            f"T{i}": (default_gb, peaks(share * default_gb, share * default_gb / 2))
            for i in range(count)
        }
    )


def test_other_types_far_below_their_defaults_lower_a_new_types_first_allocation():
    prior = lean_types(24, 0.1)
    sized = DEFAULT.size([], default_gb=8.0, prior=prior)
    assert sized.gb < 8.0 * 0.75
    assert sized.retry_gb == 8.0 * RETRY_FACTOR, "a miss of the prior retries as without it"


def test_the_prior_never_raises_a_new_type_above_its_default():
    greedy = prior_from({"big": (1.0, [Sample(3.0)]), "killed": (1.0, [Sample(2.0, killed=True)])})
    assert greedy.top_share == pytest.approx(3.0)
    for prior in (greedy, lean_types(50, 0.9)):
        sized = DEFAULT.size([], default_gb=2.0, prior=prior)
        assert (sized.gb, sized.retry_gb) == (2.0, 4.0), sized.why


def test_with_too_few_other_types_the_prior_stays_at_or_near_the_default():
    assert DEFAULT.size([], default_gb=4.0, prior=prior_from({})).gb == 4.0
    assert DEFAULT.size([], default_gb=4.0, prior=None).gb == 4.0
    sized = [DEFAULT.size([], default_gb=4.0, prior=lean_types(k, 0.01)).gb for k in (1, 4, 12, 36)]
    assert sized[0] >= 4.0 * 0.85, "one tiny type barely moves a new type"
    assert sized == sorted(sized, reverse=True) and len(set(sized)) == 4
    assert sized[-1] >= 4.0 * PRIOR_FLOOR, "the evidence is floored"


def test_prior_from_takes_each_types_largest_need_over_its_default_a_kill_bumped():
    prior = prior_from(
        {
            "a": (2.0, [Sample(0.5), Sample(0.4, killed=True, at=1.0)]),
            "b": (1.0, [Sample(0.2)]),
            "no samples": (1.0, []),
            "no default": (0.0, [Sample(5.0)]),
        }
    )
    assert prior == Prior(2, pytest.approx(0.4 * BUMP / 2.0), "a")


@pytest.mark.parametrize("name", sorted(set(POLICIES) - {"simrun"}))
def test_the_baselines_ignore_the_prior(name):
    policy = POLICIES[name]
    for history in ([], peaks(0.5, 0.6)):
        alone = policy.size(history, default_gb=4.0)
        assert policy.size(history, default_gb=4.0, prior=lean_types(30, 0.01)) == alone


def test_the_prior_applies_to_a_type_without_history_only():
    history = peaks(*[1.0, 1.02, 0.98] * 5)
    prior = lean_types(30, 0.01)
    assert DEFAULT.size(history, default_gb=4.0, prior=prior) == DEFAULT.size(
        history, default_gb=4.0
    )


PRIOR_WHY = re.compile(
    r"prior of (\d+) other types: top peak/default (\d+\.\d+) \((\w+)\) × (\d+(?:\.\d+)?) margin "
    r"= (\d+\.\d+)(?:; floored at (\d+(?:\.\d+)?))?; the default weighs as (\d+) types: "
    r"(\d+\.\d+) \^ \((\d+)/(\d+) = (\d+\.\d+)\) = (\d+\.\d+) of the default; "
    r"default (\d+\.\d+) GiB × (\d+\.\d+) = (\d+\.\d+) GiB; → (\d+\.\d+) GiB; "
    r"retry (\d+(?:\.\d+)?) × the default (\d+\.\d+) GiB = (\d+\.\d+) GiB"
)


@pytest.mark.parametrize("share", [0.3, 0.01], ids=["margin", "floored"])
def test_the_why_states_the_priors_arithmetic_and_it_recomputes(share):
    prior = lean_types(9, share, default_gb=10.0)
    sized = DEFAULT.size([], default_gb=6.0, prior=prior)
    found = PRIOR_WHY.search(sized.why)
    assert found, sized.why
    k, top, top_type, margin, evidence, floor, weighs = found.groups()[:7]
    used, k2, n, weight, got, default, share_again, gb, result = found.groups()[7:16]
    retry_factor, retry_of, retry = found.groups()[16:]
    assert (int(k), float(top), top_type) == (9, share, "T0")
    assert float(evidence) == pytest.approx(round(float(top) * float(margin), 3))
    assert float(used) == (float(floor) if floor else float(evidence))
    assert (floor is not None) == (share == 0.01)
    assert int(k2) == 9 and int(n) == 9 + int(weighs)
    assert float(weight) == pytest.approx(round(9 / int(n), 3))
    assert float(got) == pytest.approx(round(float(used) ** float(weight), 3))
    assert float(share_again) == float(got) and float(default) == 6.0
    assert float(gb) == pytest.approx(ceil_mib(6.0 * float(got))) == sized.gb == float(result)
    assert float(retry) == pytest.approx(float(retry_factor) * float(retry_of)) == sized.retry_gb


def test_a_type_whose_early_peaks_were_small_retries_a_task_needing_15_times_more_and_passes():
    """Five early peaks of 0.05 GiB plan the type small; a later task needs 0.75 GiB: its first
    attempt is killed, and the retry gets at least the type's default (1 GiB), not 2 × the
    small plan, so the task passes (it failed when the retry was only 2 × the plan)."""
    history = peaks(*[0.05] * 5)
    sizing = DEFAULT.size(history, default_gb=1.0)
    needed = 15 * 0.05
    assert sizing.gb < needed
    assert sizing.retry_gb >= needed
    assert DEFAULT.retry(history, killed_gb=sizing.gb, default_gb=1.0) >= needed


def test_the_retry_is_never_below_the_largest_need_the_type_has_shown():
    """A kill at 3 GiB long ago (beyond the recent window, passed as ``shown``) means a retry
    of at least 3 × BUMP × SHOWN_MARGIN, whatever the recent small peaks say."""
    from runs.planning.sizing import SHOWN_MARGIN

    sizing = DEFAULT.size(peaks(*[0.2] * 10), default_gb=1.0, shown=[Sample(3.0, killed=True)])
    assert sizing.retry_gb >= 3.0 * BUMP * SHOWN_MARGIN - 1e-9


def test_a_steady_type_with_three_tiny_outliers_is_planned_within_1_5_times_its_p90():
    """Thirty peaks of 1 GiB ± 3% and three of 0.01 GiB (a tiny input, an early exit): the
    spread is read from the upper half, so the outliers widen nothing (a standard deviation
    of the logs grew with them and planned the default, 8 GiB)."""
    steady = [1.0 + 0.03 * ((i * 7) % 5 - 2) / 2 for i in range(30)]
    values = steady[:10] + [0.01] + steady[10:20] + [0.01] + steady[20:] + [0.01]
    sizing = DEFAULT.size(peaks(*values), default_gb=8.0)
    ordered = sorted(values)
    p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
    assert max(steady) <= sizing.gb <= 1.5 * p90, sizing.why


def test_p95_1retry_takes_the_nearest_rank_p95_times_1_25_and_doubles_on_a_kill():
    p95 = POLICIES["p95-1retry"]
    history = peaks(*[1.0] * 19, 2.0)  # the 19th of 20 reaches 95%: 1.0
    sizing = p95.size([*history, Sample(5.0, killed=True)], default_gb=8.0)
    assert (sizing.gb, sizing.retry_gb) == (1.25, 2.5)
    assert p95.size([], default_gb=8.0).gb == 8.0


def test_the_plain_reason_names_the_runs_their_peak_and_why_the_margin():
    sizing = DEFAULT.size(peaks(0.09), default_gb=1.0)
    assert sizing.short.format(subject="this command", per="") == (
        "1 earlier run of this command peaked at 0.09 GiB; "
        "with so few runs simrun keeps a wide margin, up to its default"
    )


@pytest.mark.parametrize("default_gb", [1.0, 2.25, 8.0])
@pytest.mark.parametrize("prior", [None, Prior(3, 0.4, "a"), Prior(20, 0.1, "b")])
@pytest.mark.parametrize("count", [1, 2, 5])
def test_peaks_far_below_the_plan_lower_or_keep_it_never_raise_it(default_gb, prior, count):
    """One peak of 0.02 GiB raised the next plan from 1.65 to 2.25 GiB (issue 47): a few
    peaks far below a plan are evidence that less is needed, not a wide margin to add."""
    first = DEFAULT.size([], default_gb=default_gb, prior=prior).gb
    low = peaks(*[first * share for share in (0.01, 0.2, 0.05, 0.3, 0.1)[:count]])
    assert DEFAULT.size(low, default_gb=default_gb, prior=prior).gb <= first


def test_a_peak_near_the_plan_may_still_raise_it_up_to_the_default():
    prior = Prior(20, 0.1, "b")
    first = DEFAULT.size([], default_gb=8.0, prior=prior).gb
    assert DEFAULT.size(peaks(first * 0.95), default_gb=8.0, prior=prior).gb > first


# Margins that follow a type's own spread (``Simrun.own_margin``; constants cross-validated
# by ``bench/margins.py``): a policy with the cap on, whatever the shipped gain.
OWN = Simrun(spread_gain=2.0, spread_n=20.0)


def margin_of(sizing) -> float:
    """The margin the why applied to the median."""
    found = re.search(r"median \d+\.\d+ GiB × (\d+\.\d+) margin", sizing.why)
    assert found, sizing.why
    return float(found.group(1))


def test_a_steady_type_gets_a_narrower_own_margin_than_a_noisy_one():
    steady = OWN.size(peaks(*[1.0, 1.02, 0.98, 1.01, 0.99] * 8), default_gb=100.0)
    noisy = OWN.size(peaks(*[1.0, 1.3, 0.8, 1.15, 0.9] * 8), default_gb=100.0)
    assert "narrowed to its own spread's: exp of 2 × " in steady.why
    assert margin_of(steady) < margin_of(noisy)
    assert steady.gb < noisy.gb / 1.2


def test_the_own_margin_is_narrower_than_the_believed_one_for_a_steady_type():
    history = peaks(*[1.0, 1.05, 0.95, 1.02, 0.98] * 8)
    believed = Simrun(spread_gain=0.0).size(history, default_gb=100.0)
    own = OWN.size(history, default_gb=100.0)
    assert margin_of(own) < margin_of(believed)
    assert own.gb >= ceil_mib(1.05 * MIN_MARGIN)  # never below the top recent peak × it


def test_too_few_samples_earn_no_own_margin():
    history = peaks(*[1.0, 1.05, 0.95, 1.02, 0.98] * 2)
    off = Simrun(spread_gain=0.0)
    assert OWN.size(history, default_gb=100.0).gb == off.size(history, default_gb=100.0).gb


def test_a_kill_widens_the_own_margin_back_to_the_believed_one():
    history = peaks(*[1.0, 1.05, 0.95, 1.02, 0.98] * 8)
    before = OWN.size(history, default_gb=100.0)
    killed = [*history, Sample(1.0, at=99.0, killed=True)]
    after = OWN.size(killed, default_gb=100.0)
    assert "narrowed" not in after.why
    assert margin_of(after) > margin_of(before)
    assert after.gb >= ceil_mib(1.0 * BUMP)
