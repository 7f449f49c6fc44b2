"""What a memory sizing policy takes and gives: a type's samples in, a first allocation and
its retry out, with the arithmetic.

Pure code (stdlib only, no Django, no I/O), shared by simrun's policy (``sizing``) and the
baselines the replay benchmark compares it with (``sizing_baselines``). Memory is in plain GiB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from runs.planning.peak_model import Features

MIB = 1 / 1024
"""One MiB in GiB."""


@dataclass(frozen=True)
class Sample:
    """One finished attempt of a task type: its peak GiB, or the limit at which it was killed."""

    gb: float
    killed: bool = False
    at: float = 0.0  # when it ended, seconds (any epoch); histories are oldest first, newest last
    features: Features = ()  # what was known of its task when it was planned (peak_model)


@dataclass(frozen=True)
class Sizing:
    """The allocation of a task's first attempt and of its retry, with the arithmetic."""

    gb: float  # the first allocation
    retry_gb: float  # the allocation of the retry after the first is killed for memory
    why: str  # arithmetic a user can check: source, count, quantile, margin, floor, bump, cap
    short: str = ""
    """The same in one plain clause for a scientist, ``{subject}`` and ``{per}`` left for the
    caller ("the command", " per process"): "3 earlier runs of {subject} peaked at ..."."""


@dataclass(frozen=True)
class Prior:
    """How much of its default the most demanding of the deployment's other types needed.

    Built by ``prior_from`` from the peaks of types other than the one being sized; simrun's
    policy starts a type without history of its own from it (the baselines ignore it).
    """

    types: int  # how many other types have evidence
    top_share: float  # the largest peak / default among them (a kill at X counts as X × BUMP)
    top_type: str = ""  # the type it came from


class Policy(Protocol):
    """A sizing policy: what the first attempt and each retry of a task of one type get."""

    name: str

    def size(
        self,
        history: Sequence[Sample],
        *,
        default_gb: float,
        prior: Prior | None = None,
        shown: Sequence[Sample] = (),
        features: Features = (),
    ) -> Sizing:
        """The first allocation and its retry; ``prior`` serves a type without history,
        ``shown`` holds the type's largest needs ever seen, beyond the recent history, and
        ``features`` what is known of the task (its numeric settings, units, cores, input
        bytes), which the baselines ignore."""
        ...

    def retry(self, history: Sequence[Sample], *, killed_gb: float, default_gb: float) -> float:
        """The allocation after an attempt at killed_gb was killed for memory."""
        ...


def gb_text(value: float) -> str:
    """A GiB figure as the arithmetic of a ``Sizing.why`` shows it."""
    return f"{value:.3f} GiB"
