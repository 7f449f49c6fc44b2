"""The model of one task type's needs that simrun's policy bounds: where the next need is
centred, how widely needs spread about it, and how much evidence says so.

Pure code (stdlib only). A need is a sample's peak, or a kill at X counted as X × BUMP; it is
modelled in log. Three models, the first that holds:

- **neighbours**: the samples whose features (numeric settings, units, cores, input bytes)
  are all near the task's (within ``NEAR`` in asinh, about 10%), when there are
  ``NEIGHBOURS_MIN`` of them (effective): their weighted median and upper spread;
- **features**: a weighted least-squares line in the features that vary (log need on their
  asinh, or need on the features themselves, whichever fits closer), when its residuals
  spread less than ``FEATURE_GAIN`` × the pooled spread (the features explain the needs):
  the line at the task's features, the residuals' upper spread, and the task's leverage
  (its distance from the features seen);
- **pooled**: every sample of the type, whatever its features.

The spread is then *believed* (``believed_margin``): a posterior over a grid of spreads, the
prior a log-normal about ``prior_spread`` (how widely a type spreads before its own peaks show
it) and the likelihood that of the type's own upper spread with its degrees of freedom. A
type with few peaks keeps the prior's width; one whose ten peaks lie within 1% is believed
steady, and a volatile one keeps its own width however many peaks it shows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

Features = tuple[tuple[str, float], ...]
"""A task's numeric features known when it is planned, sorted by name."""

SPREAD_QUANTILE = 0.9
"""The spread is read from the upper half of the evidence: (its q0.9 − its median) in log,
over the normal's. Needs far below the median (a tiny input, a task that exited early) then
widen nothing, where a standard deviation grows with them."""
NEAR = 0.2
"""Two values of a feature are near when their asinh differ by at most this (about 10% for
values above 10; 512 and 560 are near, 512 and 1024 are not; cross-validated)."""
NEIGHBOURS_MIN = 8.0
"""The effective count of near samples from which they alone size a task."""
CONTINUOUS = ("input_bytes",)
"""Features that vary from task to task whatever their settings: neighbours are not sought
in them (no two inputs are alike), the line reads them."""
SLOPE_SPREAD = 0.25
"""Off the features seen, the need may follow them in a way no sample showed: where no line
could be fitted to say how, a model that does not read them (pooled, neighbours) widens its
spread by this × the distance (in asinh, so about ln of the ratio) from the nearest value
seen, as if the need grew by up to the distance's quarter power."""
FEATURE_GAIN = 0.5
"""The features model serves when its residuals' upper spread is at most this share of the
pooled one: the features explain half the variance or more (cross-validated)."""
MAX_FEATURES = 4
"""At most this many varying features enter the line (the first by name): few samples
cannot fit more."""
RIDGE = 1e-3
"""A small ridge on the slopes, in the units of the centred features' weighted squares, so a
feature that barely varies cannot make the line singular."""
SPREAD_FLOOR = 0.025
"""The least spread believed of any type (cross-validated): the next tasks may be of another
sample, whose level none of the recent peaks shows (one pipeline's alignments kept within
2% for 75 tasks, then the next sample's 15 needed 10% more)."""
SPREAD_STEP = 1.3
SPREAD_STEPS = 18
"""The spreads the posterior weighs: the floor × 1.3^k, k < 18 (0.025 to about 2.2)."""
PRIOR_WIDTH = 1.0
"""The prior's log-normal width in ln σ: a factor e either side of ``prior_spread``."""


def features_of(values: Mapping[str, object]) -> Features:
    """The numeric features of a mapping (finite ints and floats, no booleans), by name."""
    found = [
        (str(name), float(value))
        for name, value in values.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    ]
    return tuple(sorted(found))


def weighted_quantile(samples: Sequence[tuple[float, float]], q: float) -> float:
    """The smallest value whose cumulative weight reaches q of the total (value, weight pairs)."""
    ordered = sorted(samples)
    goal = q * sum(weight for _, weight in ordered) - 1e-12
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= goal:
            return value
    return ordered[-1][0]


def near(a: Features, b: Features, *, continuous: bool = False, tolerance: float = NEAR) -> bool:
    """Whether two samples' features are the same names with values within ``tolerance`` in
    asinh (the continuous ones, ``CONTINUOUS``, aside unless ``continuous``)."""
    if not continuous:
        a = tuple(f for f in a if f[0] not in CONTINUOUS)
        b = tuple(f for f in b if f[0] not in CONTINUOUS)
    if len(a) != len(b):
        return False
    return all(
        na == nb and abs(math.asinh(va) - math.asinh(vb)) <= tolerance + 1e-12
        for (na, va), (nb, vb) in zip(a, b, strict=True)
    )


def beyond(members: Sequence[Features], task: Features) -> float:
    """How far the task's features lie outside those of the members (0 within their range),
    the largest over the features, in asinh; a feature some member lacks is not compared."""
    farthest = 0.0
    for name, value in task:
        seen = [math.asinh(v) for f in members for n, v in f if n == name]
        if len(seen) == len(members) and seen:
            x = math.asinh(value)
            farthest = max(farthest, min(seen) - x, x - max(seen))
    return farthest


@dataclass(frozen=True)
class Fit:
    """Where a type's next need is centred and how its needs spread, as one model saw them."""

    model: str  # "pooled", "neighbours" or "features"
    center: float  # GiB: the median need at the task's features
    own: float  # the upper spread of the needs (or residuals) in log
    dof: float  # the degrees of freedom of ``own``
    n_eff: float  # the effective count of samples the model read
    leverage: float  # the prediction's own variance over σ²: 1/n pooled, more off the data
    members: tuple[int, ...]  # the indexes of the samples it read
    used: tuple[str, ...] = ()  # the features it modelled ("grid", "input_bytes")
    off: float = 0.0  # the log spread added for features beyond those seen (SLOPE_SPREAD)
    line: str = ""  # which line served: "log peak on asinh of" or "peak on" (the features)


def _n_eff(weights: Sequence[float]) -> float:
    total = sum(weights)
    return total * total / sum(w * w for w in weights)


def _upper(values: Sequence[float], weights: Sequence[float]) -> tuple[float, float]:
    """The weighted median of some logs and their upper spread (q0.9 − median over the
    normal's same distance)."""
    pairs = list(zip(values, weights, strict=True))
    median = weighted_quantile(pairs, 0.5)
    upper = weighted_quantile(pairs, SPREAD_QUANTILE)
    return median, (upper - median) / NormalDist().inv_cdf(SPREAD_QUANTILE)


def pooled(logs: Sequence[float], weights: Sequence[float], members: Sequence[int]) -> Fit:
    """The weighted median and upper spread of some samples' log needs."""
    chosen = [logs[i] for i in members]
    w = [weights[i] for i in members]
    n = _n_eff(w)
    median, own = _upper(chosen, w)
    return Fit("pooled", math.exp(median), own, n - 1, n, 1 / n, tuple(members))


def fit(
    logs: Sequence[float],
    weights: Sequence[float],
    features: Sequence[Features],
    task: Features,
    *,
    tolerance: float = NEAR,
    feature_gain: float = FEATURE_GAIN,
) -> Fit:
    """The model of some samples' log needs for a task with ``task`` features (see above);
    ``tolerance`` and ``feature_gain`` replace ``NEAR`` and ``FEATURE_GAIN`` (the replay's
    cross-validation tries others)."""
    everyone = list(range(len(logs)))
    whole = pooled(logs, weights, everyone)
    if not task:
        return whole
    close = [i for i in everyone if near(features[i], task, tolerance=tolerance)]
    line = _line(logs, weights, features, task, tolerance)
    base = whole
    chosen = "pooled"
    members: list[int] = everyone
    if close and len(close) < len(everyone):
        local = pooled(logs, weights, close)
        if local.n_eff >= NEIGHBOURS_MIN:
            base, chosen, members = local, "neighbours", close
    if line is not None and line.own < feature_gain * base.own:
        return line
    used = tuple(
        n for n in _varying(features, tolerance) if n in dict(task) and n not in CONTINUOUS
    )
    if line is None:
        # Off the features seen, with no line to say how the needs follow them.
        off = SLOPE_SPREAD * beyond([features[i] for i in members], task)
        return Fit(chosen, *_fields(base), used=used if chosen == "neighbours" else (), off=off)
    # A line that explains nothing still says how far off the task is: its leverage (a
    # steady type's inputs twice the largest seen widen little, four small peaks of a narrow
    # range of inputs widen much).
    center, own, dof, n_eff, leverage, kept = _fields(base)
    leverage = max(leverage, line.leverage)
    return Fit(
        chosen, center, own, dof, n_eff, leverage, kept, used if chosen == "neighbours" else ()
    )


def _varying(features: Sequence[Features], tolerance: float) -> list[str]:
    """The names of the features whose values differ among the samples (beyond
    ``tolerance``, in asinh)."""
    values: dict[str, list[float]] = {}
    for f in features:
        for name, value in f:
            values.setdefault(name, []).append(math.asinh(value))
    return sorted(n for n, v in values.items() if max(v) - min(v) > tolerance)


def _fields(f: Fit) -> tuple[float, float, float, float, float, tuple[int, ...]]:
    return f.center, f.own, f.dof, f.n_eff, f.leverage, f.members


def _line(
    logs: Sequence[float],
    weights: Sequence[float],
    features: Sequence[Features],
    task: Features,
    tolerance: float,
) -> Fit | None:
    """The least-squares line of the needs on the features that vary among the samples having
    all of the task's; None when too few samples can fit it.

    Two lines are fitted, and the one whose residuals (in log) spread less serves: log need
    on the asinh of the features (a power law: need ∝ grid^k), and need on the features
    themselves (a fixed part and a part per byte: 1.7 GiB + 1 GiB per GB read), whose
    log-log slope grows along the line, so a power law fitted to it falls short at the top.
    """
    wanted = dict(task)
    rows = [i for i, f in enumerate(features) if {n for n, _ in f} >= set(wanted)]
    if not rows:
        return None
    raw = [dict(features[i]) for i in rows]
    w = [weights[i] for i in rows]
    n = _n_eff(w)
    scale = n / sum(w)
    w = [x * scale for x in w]  # precision weights summing to the effective count
    total = sum(w)

    def spread(name: str) -> float:
        xs = [math.asinh(v[name]) for v in raw]
        mean = sum(wi * x for wi, x in zip(w, xs, strict=True)) / total
        return sum(wi * (x - mean) ** 2 for wi, x in zip(w, xs, strict=True)) / total

    varying = [name for name in sorted(wanted) if spread(name) > (tolerance / 4) ** 2]
    varying = varying[:MAX_FEATURES]
    p = 1 + len(varying)
    if not varying or n < p + 3:
        return None
    ys = [logs[i] for i in rows]
    fits = [
        (*found, "peak on" if linear else "log peak on asinh of")
        for linear in (False, True)
        if (found := _fitted(raw, ys, w, wanted, varying, linear=linear)) is not None
    ]
    if not fits:
        return None
    center, own, leverage, line = min(fits, key=lambda f: f[1])
    return Fit("features", center, own, n - p, n, leverage, tuple(rows), tuple(varying), line=line)


def _fitted(
    raw: Sequence[Mapping[str, float]],
    logs: Sequence[float],
    w: Sequence[float],
    wanted: Mapping[str, float],
    varying: Sequence[str],
    *,
    linear: bool,
) -> tuple[float, float, float] | None:
    """One line's need at the task (GiB), its residuals' upper spread (log) and the task's
    leverage: log need on asinh(features), or ``linear`` need on the features (standardised);
    None when it cannot be fitted or fits a need of 0 or less."""
    total = sum(w)

    def cast(value: float) -> float:
        return value if linear else math.asinh(value)

    columns = {name: [cast(v[name]) for v in raw] for name in varying}
    means = {n: sum(wi * x for wi, x in zip(w, c, strict=True)) / total for n, c in columns.items()}
    sds = {
        n: math.sqrt(sum(wi * (x - means[n]) ** 2 for wi, x in zip(w, c, strict=True)) / total)
        for n, c in columns.items()
    }
    if not all(sds.values()):
        return None
    xs = [[1.0, *((columns[n][i] - means[n]) / sds[n] for n in varying)] for i in range(len(raw))]
    ys = [math.exp(y) for y in logs] if linear else list(logs)
    p = 1 + len(varying)
    a = [
        [sum(wi * x[r] * x[c] for wi, x in zip(w, xs, strict=True)) for c in range(p)]
        for r in range(p)
    ]
    for k in range(1, p):
        a[k][k] += RIDGE * total
    b = [sum(wi * x[r] * y for wi, x, y in zip(w, xs, ys, strict=True)) for r in range(p)]
    x0 = [1.0, *((cast(wanted[n]) - means[n]) / sds[n] for n in varying)]
    coef = _solve(a, b)
    inverse_x0 = _solve(a, x0)
    if coef is None or inverse_x0 is None:
        return None
    fitted = [sum(c * xi for c, xi in zip(coef, x, strict=True)) for x in xs]
    if linear and min(fitted) <= 0:
        return None
    if linear:
        fitted = [math.log(f) for f in fitted]
    residuals = [y - f for y, f in zip(logs, fitted, strict=True)]
    shift, own = _upper(residuals, w)
    at = sum(c * xi for c, xi in zip(coef, x0, strict=True))
    if linear:
        at = math.log(at) if at > 0 else min(fitted)
    # Never below the line's smallest fitted need: downward, a line may forget the fixed
    # part of a process's memory.
    at = max(at, min(fitted))
    leverage = sum(u * v for u, v in zip(x0, inverse_x0, strict=True))
    return math.exp(at + shift), own, leverage


def _solve(a: Sequence[Sequence[float]], b: Sequence[float]) -> list[float] | None:
    """x with a·x = b (Gaussian elimination with partial pivoting); None if singular."""
    size = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(size):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [x - factor * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[r][size] / m[r][r] for r in range(size)]


def believed_margin(
    own: float,
    dof: float,
    leverage: float,
    *,
    target: float,
    prior_spread: float,
    floor: float = SPREAD_FLOOR,
    off: float = 0.0,
) -> tuple[float, float]:
    """The margin (a factor) the next need stays below with probability ``target``, and the
    spread it amounts to: σ such that margin = exp(z · σ · √(1 + leverage)).

    The spread is uncertain: each σ of ``SPREAD_GRID`` weighs its prior (log-normal about
    ``prior_spread``, ``PRIOR_WIDTH`` wide) times the likelihood of the own spread ``own``
    with ``dof`` degrees of freedom, ∝ σ^−dof · exp(−dof · own² / 2σ²); the bound is the
    ``target`` quantile of the mixture of their normals. Rounded inputs, cached: the replay
    asks it for every task of a trace.
    """
    return _believed(
        round(max(own, 0.0), 4),
        round(max(dof, 0.0), 1),
        round(max(leverage, 0.0), 3),
        target,
        prior_spread,
        floor,
        round(off, 3),
    )


@functools.lru_cache(maxsize=65536)
def _believed(
    own: float,
    dof: float,
    leverage: float,
    target: float,
    prior_spread: float,
    floor: float,
    off: float,
) -> tuple[float, float]:
    grid = [floor * SPREAD_STEP**k for k in range(SPREAD_STEPS)]
    logs = []
    for sigma in grid:
        prior = -0.5 * ((math.log(sigma) - math.log(prior_spread)) / PRIOR_WIDTH) ** 2
        likelihood = -dof * math.log(sigma) - dof * own * own / (2 * sigma * sigma)
        logs.append(prior + likelihood)
    top = max(logs)
    weights = [math.exp(x - top) for x in logs]
    total = sum(weights)
    weights = [w / total for w in weights]
    stretch = math.sqrt(1 + leverage)
    normal = NormalDist()

    def reached(m: float) -> float:
        pairs = zip(weights, grid, strict=True)
        return sum(w * normal.cdf(m / math.hypot(s * stretch, off)) for w, s in pairs)

    low, high = 0.0, 10 * (grid[-1] * stretch + off)
    for _ in range(50):
        middle = (low + high) / 2
        if reached(middle) < target:
            low = middle
        else:
            high = middle
    z = normal.inv_cdf(target)
    return math.exp(high), high / (z * stretch)
