"""The sizing policies simrun's is compared with in the replay benchmark
(``bench/sizing_replay.py``): a static allocation, the largest peak seen, doubling,
Kubernetes' VPA recommender and a naive p95 rule.

Pure code (stdlib only, no Django, no I/O); each ignores the prior, the needs shown and the
task's features that simrun's policy reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runs.planning.peak_model import Features, weighted_quantile
from runs.planning.sizing_base import MIB, Prior, Sample, Sizing, gb_text


def _doubled(killed_gb: float) -> float:
    return killed_gb * 2


def _peaks(history: Sequence[Sample]) -> list[float]:
    return [s.gb for s in history if not s.killed]


@dataclass
class Static:
    """The type's own static allocation, whatever was seen; a retry doubles."""

    name: str = "static"

    def size(
        self,
        history: Sequence[Sample],
        *,
        default_gb: float,
        prior: Prior | None = None,
        shown: Sequence[Sample] = (),
        features: Features = (),
    ) -> Sizing:
        retry = self.retry(history, killed_gb=default_gb, default_gb=default_gb)
        return Sizing(
            default_gb, retry, f"static {gb_text(default_gb)}; retry 2 × it = {gb_text(retry)}"
        )

    def retry(self, history: Sequence[Sample], *, killed_gb: float, default_gb: float) -> float:
        return _doubled(killed_gb)


@dataclass
class MaxSeen:
    """Tovar et al.'s first allocation: the largest clean peak seen (the default before any)."""

    name: str = "max-seen"

    def size(
        self,
        history: Sequence[Sample],
        *,
        default_gb: float,
        prior: Prior | None = None,
        shown: Sequence[Sample] = (),
        features: Features = (),
    ) -> Sizing:
        peaks = _peaks(history)
        if not peaks:
            gb, why = default_gb, f"default {gb_text(default_gb)} (no peaks)"
        else:
            gb, why = max(peaks), f"max of {len(peaks)} peaks {gb_text(max(peaks))}"
        retry = self.retry(history, killed_gb=gb, default_gb=default_gb)
        return Sizing(gb, retry, f"{why}; retry 2 × {gb_text(gb)} = {gb_text(retry)}")

    def retry(self, history: Sequence[Sample], *, killed_gb: float, default_gb: float) -> float:
        return _doubled(killed_gb)


@dataclass
class Doubling(MaxSeen):
    """Max seen, doubled on every failure (Witt et al.'s exponential failure handling, base 2).

    Its first allocation is max-seen's; what differs is that the replay counts it with
    unlimited retries, as the literature does, where max-seen has simrun's one.
    """

    name: str = "doubling"


VPA_QUANTILE = 0.9
VPA_MARGIN = 1.15
VPA_OOM_MIN_BUMP_GB = 100 * MIB
VPA_OOM_BUMP = 1.2
VPA_MIN_GB = 250 * MIB
"""The recommender's ``--pod-recommendation-min-memory-mb`` default."""
VPA_HALF_LIFE_S = 24 * 3600
"""The recommender's decaying histogram halves a sample's weight every 24 h."""


@dataclass
class Vpa:
    """Kubernetes' VPA recommender: p90 of peaks + 15%; a kill counts as max(+100 MiB, ×1.2)."""

    name: str = "vpa"

    def size(
        self,
        history: Sequence[Sample],
        *,
        default_gb: float,
        prior: Prior | None = None,
        shown: Sequence[Sample] = (),
        features: Features = (),
    ) -> Sizing:
        if not history:
            gb = default_gb
            why = f"default {gb_text(gb)} (no peaks)"
        else:
            newest = history[-1].at
            samples = [
                (
                    max(s.gb + VPA_OOM_MIN_BUMP_GB, s.gb * VPA_OOM_BUMP) if s.killed else s.gb,
                    0.5 ** ((newest - s.at) / VPA_HALF_LIFE_S),
                )
                for s in history
            ]
            p90 = weighted_quantile(samples, VPA_QUANTILE)
            gb = max(VPA_MIN_GB, p90 * VPA_MARGIN)
            why = f"p90 of {len(samples)} samples {gb_text(p90)} × {VPA_MARGIN} = {gb_text(gb)}"
        retry = self.retry(history, killed_gb=gb, default_gb=default_gb)
        return Sizing(gb, retry, f"{why}; retry {gb_text(retry)}")

    def retry(self, history: Sequence[Sample], *, killed_gb: float, default_gb: float) -> float:
        return max(killed_gb + VPA_OOM_MIN_BUMP_GB, killed_gb * VPA_OOM_BUMP)


P95_QUANTILE = 0.95
P95_MARGIN = 1.25


@dataclass
class P95OneRetry:
    """A naive rule a reviewer would try: p95 of the clean peaks × 1.25, one retry at 2×.

    The p95 is the nearest rank (the smallest peak with 95% of the peaks at or below it);
    before any clean peak, the default.
    """

    name: str = "p95-1retry"

    def size(
        self,
        history: Sequence[Sample],
        *,
        default_gb: float,
        prior: Prior | None = None,
        shown: Sequence[Sample] = (),
        features: Features = (),
    ) -> Sizing:
        peaks = _peaks(history)
        if not peaks:
            gb, why = default_gb, f"default {gb_text(default_gb)} (no peaks)"
        else:
            p95 = weighted_quantile([(p, 1.0) for p in peaks], P95_QUANTILE)
            gb = p95 * P95_MARGIN
            why = f"p95 of {len(peaks)} peaks {gb_text(p95)} × {P95_MARGIN:g} = {gb_text(gb)}"
        retry = self.retry(history, killed_gb=gb, default_gb=default_gb)
        return Sizing(gb, retry, f"{why}; retry 2 × {gb_text(gb)} = {gb_text(retry)}")

    def retry(self, history: Sequence[Sample], *, killed_gb: float, default_gb: float) -> float:
        return _doubled(killed_gb)
