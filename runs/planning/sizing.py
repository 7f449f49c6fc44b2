"""simrun's memory sizing policy: a task type's history of peaks and kills in, an allocation
out; the map of every policy; what an attempt's allocation wasted.

Pure code (stdlib only, no Django, no I/O): the planner sizes tasks with ``DEFAULT`` and the
replay benchmark (``bench/sizing_replay.py``) plays every policy of ``POLICIES`` (simrun's and
the baselines of ``sizing_baselines``) against real traces. A type without history can be
sized from the other types' evidence (``prior_from``). Memory is in plain GiB; callers round
to their own steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from runs.planning import peak_model
from runs.planning.peak_model import Features
from runs.planning.sizing_base import MIB, Policy, Prior, Sample, Sizing, gb_text
from runs.planning.sizing_baselines import Doubling, MaxSeen, P95OneRetry, Static, Vpa

MIN_GB = 0.05
"""No allocation below this: a process needs some memory whatever its peaks say."""


@dataclass(frozen=True)
class Wastage:
    """Memory × time of attempts, in GiB·h: what the task used, over- and under-sized."""

    used_gbh: float = 0.0
    over_gbh: float = 0.0
    under_gbh: float = 0.0

    @property
    def wasted_gbh(self) -> float:
        return self.over_gbh + self.under_gbh

    @property
    def maq(self) -> float:
        """Memory allocation quality (Witt et al.): used / (used + over + under)."""
        total = self.used_gbh + self.wasted_gbh
        return self.used_gbh / total if total > 0 else 1.0

    def __add__(self, other: Wastage) -> Wastage:
        return Wastage(
            self.used_gbh + other.used_gbh,
            self.over_gbh + other.over_gbh,
            self.under_gbh + other.under_gbh,
        )


def wastage(*, peak_gb: float, limit_gb: float, seconds: float, killed: bool) -> Wastage:
    """One attempt's wastage: a killed attempt wasted its whole limit until the kill."""
    hours = seconds / 3600
    if killed:
        return Wastage(under_gbh=limit_gb * hours)
    return Wastage(used_gbh=peak_gb * hours, over_gbh=max(0.0, limit_gb - peak_gb) * hours)


# simrun's policy. Each constant is a statement about evidence; those that trade waste
# against kills (TARGET, PRIOR_SPREAD, SPREAD_FLOOR, BUMP, WINDOW, HALF_LIFE, EMPIRICAL_N,
# the feature model's NEAR and FEATURE_GAIN, the prior's PRIOR_MARGIN, PRIOR_DEFAULT_TYPES,
# PRIOR_FLOOR: ``bench/sizing_constants.py``; the own spread's SPREAD_GAIN, SPREAD_N,
# MIN_MARGIN: ``bench/margins.py``) are chosen by the replay's leave-one-trace-out
# cross-validation (``bench/sizing_replay.py --cross-validate``, ``--margins``), never by
# their total over the traces at hand.
WINDOW = 100
"""The newest observations of a type that count, and all the planner reads of a type
(``runs/planning/submission.py``; cross-validated). Recency weighting (HALF_LIFE) already lets the
newest lead, so the window only decides what is forgotten: a type whose inputs come in
groups (one sample's tasks, then the next's) forgot its large group within 50 samples and
was killed when it came back."""
HALF_LIFE = 60.0
"""A sample's weight halves every this many newer samples: the newest evidence leads."""
TARGET = 0.995
"""The share of the type's next peaks the first allocation aims to fit (cross-validated)."""
PRIOR_SPREAD = 0.3
"""The spread (σ of log peaks) a type is believed to have before its own peaks show theirs
(cross-validated): the centre of the log-normal prior over spreads (``peak_model``). Not the
median type's (about 0.08 in three nf-core pipelines) but a spread one: a type's first peaks
are often its smallest inputs, so a few peaks must leave room for a trend they cannot show
yet; its own peaks outweigh it as they come (ten within 1% are believed steady)."""
EMPIRICAL_N = 25
"""From this many recent peaks on (near the task's features), their top (× MIN_MARGIN) caps
the bound: the data show where the tail ends, which a log-normal overshoots."""
MIN_MARGIN = 1.02
"""Never closer than this to a recent peak: peaks vary a little even for one input
(cross-validated with SPREAD_GAIN: ``bench/margins.py``; 1.05 before it)."""
BUMP = 1.5
"""A kill at X proves the need is above X: the next allocation is at least X × BUMP."""
RETRY_FACTOR = 2.0
"""The retry gets at least this many times the killed allocation: a second kill fails the
task."""
SHOWN_MARGIN = 1.25
"""The retry gets at least the largest need the type ever showed × this."""
PRIOR_MARGIN = 1.25
"""The prior's evidence is the top share of the other types × this: room for a type a quarter
more demanding than any seen (cross-validated); a miss costs the first wave one attempt
each, since its retry gets twice the default."""
PRIOR_FLOOR = 0.1
"""The prior's evidence never says less than this share of the default, whatever the other
types needed: one tiny type cannot pull a new type far below what its author set
(cross-validated)."""
PRIOR_DEFAULT_TYPES = 17
"""The type's own default counts as this many types that needed all of theirs. With K other
types the next one needs more than the most demanding of them with probability 1/(K + 1)
(types alike), so the evidence earns its weight K/(K + 17) slowly: near the default for a
few types, halfway (in log) at 17, three quarters at 51 (cross-validated on a grid of 6, 8,
12, 17, 24: the folds that fit rnaseq take 17, the smallest that plans its STAR_ALIGN wave
with 10% to spare; 24 before the grid had 17)."""
SPREAD_GAIN = 2.0
"""From SPREAD_N effective samples on, without a recent kill, the margin is at most
exp(this × the type's own upper spread × √(1 + leverage)): a type that has shown its spread
is sized by it, not by the tail TARGET's normal quantile (2.58 σ) extrapolates. 0 turns it
off (cross-validated with SPREAD_N and MIN_MARGIN: ``bench/margins.py``)."""
SPREAD_N = 20.0
"""The effective count of samples from which a type's own spread alone sizes its margin."""
FEW_RUNS = 5.0
"""Below this many effective samples the short reason says the margin is wide for want of
runs."""


def need(sample: Sample, bump: float = BUMP) -> float:
    """What a sample says a task of its type needed: its peak, or more than its kill (the
    killed limit × ``bump``)."""
    return sample.gb * bump if sample.killed else sample.gb


def retry_gb(killed_gb: float, *, default_gb: float, needs: Sequence[float] = ()) -> float:
    """THE RETRY RULE, stated once: what the one retry after a kill for memory gets.

    The largest of RETRY_FACTOR × the killed allocation; the type's default, what a type
    without history gets (so a type whose early peaks were small never retries below it);
    and the largest need the type has shown (a peak, or a kill at X as X × BUMP) ×
    SHOWN_MARGIN. A second kill fails the task, so the retry cannot be small.
    """
    top = max(needs, default=0.0)
    return _up(max(killed_gb * RETRY_FACTOR, default_gb, top * SHOWN_MARGIN))


def _retry_why(killed_gb: float, default_gb: float, needs: Sequence[float]) -> str:
    retry = retry_gb(killed_gb, default_gb=default_gb, needs=needs)
    top = max(needs, default=0.0)
    return (
        f"retry {gb_text(retry)}, the largest of {RETRY_FACTOR:g} × {gb_text(killed_gb)}, "
        f"the default {gb_text(default_gb)} and the largest need shown "
        f"{gb_text(top)} × {SHOWN_MARGIN:g}"
    )


def prior_from(others: Mapping[str, tuple[float, Sequence[Sample]]], bump: float = BUMP) -> Prior:
    """The prior from other types' evidence: type → (its default GiB, its samples).

    A type's share is its largest need over its default: a clean peak counts as itself, a
    kill at X as X × ``bump`` (the need was above X). Types without samples or default are
    skipped.
    """
    shares = {
        name: max(need(s, bump) for s in samples) / default_gb
        for name, (default_gb, samples) in others.items()
        if samples and default_gb > 0
    }
    if not shares:
        return Prior(0, 0.0)
    top = max(shares, key=lambda name: shares[name])
    return Prior(len(shares), shares[top], top)


def _short_gb(gb: float) -> str:
    """A size as a scientist reads it: two significant digits, whole GiB from 10 on."""
    return f"{gb:.0f} GiB" if gb >= 10 else f"{gb:.2g} GiB"


def _value(value: float) -> str:
    """A feature's value as a scientist reads it: 512, 0.25, 1.2e+09."""
    return f"{value:.3g}"


def _near_phrase(features: Features) -> str:
    """' with `grid` near 512 and `cores` near 2': the neighbours a plan was read from."""
    parts = [f"`{name}` near {_value(value)}" for name, value in features]
    return " with " + " and ".join(parts) if parts else ""


def _runs(peaks: Sequence[float], kills: Sequence[float], near_: str = "") -> str:
    """'3 earlier runs of {subject} peaked at up to 0.5 GiB{per}': what the plan rests on."""
    n = len(peaks) + len(kills)
    said = f"{n} earlier run{'s' if n != 1 else ''} of {{subject}}{near_}"
    peaked = f"peaked at {'up to ' if len(peaks) > 1 else ''}{_short_gb(max(peaks, default=0))}"
    killed = (
        f"killed for memory at {'up to ' if len(kills) > 1 else ''}"
        f"{_short_gb(max(kills, default=0))}"
    )
    if not kills:
        return f"{said} {peaked}{{per}}"
    were = "was" if len(kills) == 1 else "were"
    if not peaks:
        return f"{said} {were} {killed}{{per}}"
    return f"{said}: {len(peaks)} {peaked}{{per}} and {len(kills)} {were} {killed}"


def _model_said(fit: peak_model.Fit, features: Features) -> tuple[str, str, str]:
    """What the arithmetic, the neighbours' phrase and the plain reason say of the model."""
    if fit.model == "neighbours":
        near_ = _near_phrase(tuple((n, v) for n, v in features if n in fit.used))
        named = f" ({near_.removeprefix(' with ')})" if near_ else ""
        return f" near the task's features{named}", near_, ""
    if fit.model == "features":
        given = dict(features)
        at = " and ".join(f"`{name}` {_value(given[name])}" for name in fit.used)
        return (
            f", a line of {fit.line} {', '.join(fit.used)} read at {at}",
            "",
            f"; their peaks follow {' and '.join(f'`{n}`' for n in fit.used)}, "
            f"so simrun reads them at {at}",
        )
    return "", "", ""


@dataclass
class Simrun:
    """simrun's policy: a robust upper prediction bound of the type's recent evidence.

    Needs are taken as log-normal about a model of the WINDOW newest samples
    (``peak_model``): the samples near the task's features, a line in them, or all of the
    type's. The allocation is the model's median × the margin the next need stays below
    with probability TARGET, the spread believed from the type's own upper spread and the
    prior's (PRIOR_SPREAD), so few samples give a wide margin (and then the default, which
    caps the allocation unless a recent kill proved it too small), a steady type a few
    percent; from SPREAD_N samples without a recent kill, the type's own spread alone
    (``own_margin``). A kill at X is a censored observation: it counts as X × BUMP and floors the
    allocation at X × BUMP while it is among the recent samples near the task. A type
    without history starts from how much of their defaults the deployment's other types
    needed (``Prior``). The retry follows ``retry_gb``.
    """

    name: str = "simrun"
    target: float = TARGET
    prior_spread: float = PRIOR_SPREAD
    prior_margin: float = PRIOR_MARGIN
    prior_default_types: int = PRIOR_DEFAULT_TYPES
    prior_floor: float = PRIOR_FLOOR
    window: int = WINDOW
    spread_floor: float = peak_model.SPREAD_FLOOR
    spread_gain: float = SPREAD_GAIN
    spread_n: float = SPREAD_N
    min_margin: float = MIN_MARGIN
    half_life: float = HALF_LIFE
    empirical_n: int = EMPIRICAL_N
    bump: float = BUMP
    near: float = peak_model.NEAR
    feature_gain: float = peak_model.FEATURE_GAIN

    def size(
        self,
        history: Sequence[Sample],
        *,
        default_gb: float,
        prior: Prior | None = None,
        shown: Sequence[Sample] = (),
        features: Features = (),
    ) -> Sizing:
        recent = history[-self.window :]
        if not recent:
            return self.unseen(default_gb, prior, shown)
        weights = [0.5 ** ((len(recent) - 1 - i) / self.half_life) for i in range(len(recent))]
        logs = [math.log(max(MIB, need(s, self.bump))) for s in recent]
        fit = peak_model.fit(
            logs,
            weights,
            [s.features for s in recent],
            features,
            tolerance=self.near,
            feature_gain=self.feature_gain,
        )
        read = [recent[i] for i in fit.members]
        local = (
            [
                s
                for s in recent
                if peak_model.near(s.features, features, continuous=True, tolerance=self.near)
            ]
            if fit.model == "features"
            else read
        )
        kills = [s.gb for s in local if s.killed]
        peaks = [s.gb for s in local if not s.killed]
        read_kills = [s.gb for s in read if s.killed]
        read_peaks = [s.gb for s in read if not s.killed]
        stretch, spread = peak_model.believed_margin(
            fit.own,
            fit.dof,
            fit.leverage,
            target=self.target,
            prior_spread=self.prior_spread,
            floor=self.spread_floor,
            off=fit.off,
        )
        margin = round(max(self.min_margin, stretch), 3)
        least = ", the least" if stretch < self.min_margin else ""
        own_margin = self.own_margin(fit, kills=len(read_kills))
        if own_margin is not None and own_margin < margin:
            margin = own_margin
            least = (
                f"; narrowed to its own spread's: exp of {self.spread_gain:g} × "
                f"{max(fit.own, self.spread_floor):.3f} × √(1 + {fit.leverage:.3f}), "
                f"at least {self.min_margin:g}"
            )
        center = round(fit.center, 3) or MIB
        gb = _up(center * margin)
        where, near_, follows = _model_said(fit, features)
        z = NormalDist().inv_cdf(self.target)
        steps = [
            f"p{self.target * 100:g} bound of "
            f"{_evidence(len(read_peaks), len(read_kills), self.bump)}"
            f"{where}: median {gb_text(center)} × {margin:.3f} margin (exp of {z:.2f} × spread "
            f"{spread:.3f} × √(1 + {fit.leverage:.3f}){least}, own upper spread "
            f"{fit.own:.3f} of n {fit.n_eff:.1f}, prior {self.prior_spread:g}) = {gb_text(gb)}"
        ]
        if fit.n_eff < FEW_RUNS:
            reason = "with so few runs simrun keeps a wide margin"
        elif margin >= 1.5:
            reason = "their peaks vary widely, so simrun keeps a wide margin"
        else:
            reason = f"simrun adds {round(100 * (margin - 1))}% for how much they vary"
        if len(peaks) >= self.empirical_n and gb > _up(round(max(peaks), 3) * self.min_margin):
            gb = _up(round(max(peaks), 3) * self.min_margin)
            steps.append(
                f"capped at the top of {len(peaks)} peaks {gb_text(max(peaks))} × "
                f"{self.min_margin:g} = {gb_text(gb)}"
            )
            reason = f"simrun keeps {round(100 * (self.min_margin - 1))}% above the largest"
        if not read_kills and gb > default_gb:
            gb = default_gb
            steps.append(f"capped at the default {gb_text(default_gb)} (no recent kill)")
            reason = (
                f"{reason}, up to its default"
                if fit.n_eff < FEW_RUNS
                else "without a kill simrun never plans more than the default"
            )
        before = self.unseen(default_gb, prior, shown).gb
        top_need = max((need(s, self.bump) for s in recent), default=0.0)
        if not read_kills and gb > before and top_need * SHOWN_MARGIN <= before:
            gb = before
            steps.append(
                f"capped at the plan without history {gb_text(before)}: the largest need "
                f"{gb_text(top_need)} × {SHOWN_MARGIN:g} is below it"
            )
            reason = "peaks well below the plan never raise it"
        floor, floor_why = max(_floors(peaks, kills, self.min_margin, self.bump))
        if kills and gb > _up(floor * RETRY_FACTOR):
            # Peaks far below a kill are of inputs before a step up: their spread is no
            # evidence of the need, so the bound stops where the floor's own retry would be.
            gb = _up(floor * RETRY_FACTOR)
            steps.append(
                f"capped at {RETRY_FACTOR:g} × the floor {gb_text(floor)} = {gb_text(gb)} "
                "(peaks below a kill do not bound its need)"
            )
            reason = "a kill proves more is needed, so simrun plans well above it"
        if floor > gb:
            gb = floor
            steps.append(floor_why)
            reason = (
                "a kill proves more is needed, so simrun plans above it"
                if kills and floor == _up(round(max(kills), 3) * self.bump)
                else "simrun stays a little above the largest"
            )
        needs = [need(s, self.bump) for s in (*recent, *shown)]
        retry = retry_gb(gb, default_gb=default_gb, needs=needs)
        steps.append(f"→ {gb_text(gb)}; {_retry_why(gb, default_gb, needs)}")
        short = f"{_runs(read_peaks, read_kills, near_)}{follows}; {reason}"
        return Sizing(gb, retry, "; ".join(steps), short)

    def own_margin(self, fit: peak_model.Fit, *, kills: int) -> float | None:
        """The margin a type's own spread earns, or None while it has not earned one.

        exp(spread_gain × its own upper spread (at least the floor) × √(1 + leverage)), at
        least MIN_MARGIN, once the model read spread_n effective samples: the margin follows
        the type's spread, narrow for a steady type, wide for a noisy one. A recent kill among
        the samples read, or a task off the features seen, earns none: the believed margin
        (wider) serves again, and the kill widens the spread it reads.
        """
        if self.spread_gain <= 0 or kills or fit.off > 0 or fit.n_eff < self.spread_n:
            return None
        sigma = max(fit.own, self.spread_floor) * math.sqrt(1 + fit.leverage)
        return round(max(self.min_margin, math.exp(self.spread_gain * sigma)), 3)

    def retry(self, history: Sequence[Sample], *, killed_gb: float, default_gb: float) -> float:
        needs = [need(s, self.bump) for s in history]
        return retry_gb(killed_gb, default_gb=default_gb, needs=needs)

    def unseen(
        self, default_gb: float, prior: Prior | None, shown: Sequence[Sample] = ()
    ) -> Sizing:
        """A type without history: its default, shrunk toward what the other types needed.

        The share of the default is (top share × margin) ^ (K / (K + PRIOR_DEFAULT_TYPES)):
        a weighted geometric mean of the evidence and the default (share 1). The retry is what
        the type would get without the prior, 2 × its default: a miss costs one attempt.
        """
        needs = [need(s, self.bump) for s in shown]
        retry = retry_gb(default_gb, default_gb=default_gb, needs=needs)
        if prior is None or prior.types == 0:
            return Sizing(
                default_gb,
                retry,
                f"default {gb_text(default_gb)} (no history); "
                f"retry {RETRY_FACTOR:g} × {gb_text(default_gb)} = {gb_text(retry)}",
                f"no earlier run of {{subject}}, so its default of {_short_gb(default_gb)}{{per}}",
            )
        top = round(prior.top_share, 3)
        evidence = round(top * self.prior_margin, 3)
        steps = [
            f"no history; prior of {prior.types} other type{'s' if prior.types > 1 else ''}: "
            f"top peak/default {top:.3f} ({prior.top_type}) × {self.prior_margin:g} margin "
            f"= {evidence:.3f}"
        ]
        if evidence < self.prior_floor:
            evidence = self.prior_floor
            steps.append(f"floored at {self.prior_floor:g}")
        elif evidence > 1:
            evidence = 1.0
            steps.append("capped at 1, the default")
        weight = round(prior.types / (prior.types + self.prior_default_types), 3)
        share = round(evidence**weight, 3)
        steps.append(
            f"the default weighs as {self.prior_default_types} types: {evidence:.3f} ^ "
            f"({prior.types}/{prior.types + self.prior_default_types} = {weight:.3f}) "
            f"= {share:.3f} of the default"
        )
        gb = default_gb
        if share < 1:
            gb = _up(default_gb * share)
            steps.append(f"default {gb_text(default_gb)} × {share:.3f} = {gb_text(gb)}")
        if gb < MIN_GB <= default_gb:
            gb = MIN_GB
            steps.append(f"floor {gb_text(MIN_GB)}")
        steps.append(
            f"→ {gb_text(gb)}; retry {RETRY_FACTOR:g} × the default {gb_text(default_gb)} "
            f"= {gb_text(retry)} (as without the prior)"
        )
        others = f"{prior.types} other task type{'s' if prior.types > 1 else ''}"
        short = (
            f"no earlier run of {{subject}}; the {others} seen so far needed at most "
            f"{round(100 * prior.top_share)}% of their defaults, so simrun starts at "
            f"{round(100 * share)}% of its default of {_short_gb(default_gb)}{{per}}"
        )
        return Sizing(gb, retry, "; ".join(steps), short)


def _up(gb: float) -> float:
    """Rounded up to the MiB shown in a why (3 decimals of GiB), so its arithmetic checks."""
    return math.ceil(round(gb * 1000, 6)) / 1000


def _floors(
    peaks: Sequence[float],
    kills: Sequence[float],
    min_margin: float = MIN_MARGIN,
    bump: float = BUMP,
) -> list[tuple[float, str]]:
    """The least allocations the recent evidence allows, each with its arithmetic."""
    floors = [(MIN_GB, f"floor {gb_text(MIN_GB)}")]
    if peaks:
        top = round(max(peaks), 3)
        floor = _up(top * min_margin)
        floors.append((floor, f"floor top peak {gb_text(top)} × {min_margin:g} = {gb_text(floor)}"))
    if kills:
        top = round(max(kills), 3)
        floor = _up(top * bump)
        plural = "s" if len(kills) > 1 else ""
        floors.append(
            (
                floor,
                f"floor {len(kills)} kill{plural} at up to {gb_text(top)} × {bump:g} bump "
                f"= {gb_text(floor)}",
            )
        )
    return floors


def _evidence(peaks: int, kills: int, bump: float = BUMP) -> str:
    """'12 recent peaks and 1 kill × 1.5': what the model was fitted to."""
    parts = [f"{peaks} recent peak{'s' if peaks != 1 else ''}"] if peaks else []
    if kills:
        parts.append(f"{kills} recent kill{'s' if kills != 1 else ''} × {bump:g}")
    return " and ".join(parts)


POLICIES: dict[str, Policy] = {
    p.name: p for p in (Simrun(), Static(), MaxSeen(), Doubling(), Vpa(), P95OneRetry())
}
DEFAULT = POLICIES["simrun"]
