"""``ising``: the 2D Ising model by Metropolis Monte Carlo, one temperature per unit.

Each unit equilibrates an ``size``×``size`` periodic lattice at one temperature and measures
energy, magnetisation, specific heat and susceptibility per spin; the merge writes
``out/ising.csv`` and a plot of the four curves, ``out/ising.svg``, where the phase
transition near T ≈ 2.269 shows.
"""

from __future__ import annotations

import csv
import math
import random
from typing import Any

from pydantic import BaseModel, Field, model_validator

from harness.tasktypes import MergeContext, TaskType

CURVES = ("energy", "magnetization", "specific_heat", "susceptibility")


class IsingSettings(BaseModel):
    """The sweep: ``points`` temperatures from ``t_min`` to ``t_max``."""

    size: int = Field(default=16, ge=4, le=256, description="lattice side")
    points: int = Field(default=24, ge=1, le=10_000, description="temperatures")
    t_min: float = Field(default=1.5, gt=0)
    t_max: float = Field(default=3.5, gt=0)
    sweeps: int = Field(default=400, ge=10, le=1_000_000, description="measured sweeps")
    seed: int = 1

    @model_validator(mode="after")
    def _range(self) -> IsingSettings:
        if self.t_max < self.t_min:
            raise ValueError("t_max must not be below t_min")
        return self


def temperature(settings: IsingSettings, index: int) -> float:
    if settings.points == 1:
        return settings.t_min
    return settings.t_min + (settings.t_max - settings.t_min) * index / (settings.points - 1)


def units(settings: IsingSettings) -> int:
    return settings.points


def _sweep(spins: list[int], size: int, beta: float, rng: random.Random) -> None:
    accept = {4: math.exp(-4 * beta), 8: math.exp(-8 * beta)}
    n = size * size
    for _ in range(n):
        site = rng.randrange(n)
        row, col = divmod(site, size)
        neighbours = (
            spins[((row + 1) % size) * size + col]
            + spins[((row - 1) % size) * size + col]
            + spins[row * size + (col + 1) % size]
            + spins[row * size + (col - 1) % size]
        )
        delta = 2 * spins[site] * neighbours
        if delta <= 0 or rng.random() < accept[delta]:
            spins[site] = -spins[site]


def _energy(spins: list[int], size: int) -> int:
    total = 0
    for row in range(size):
        for col in range(size):
            s = spins[row * size + col]
            total -= s * (
                spins[row * size + (col + 1) % size] + spins[((row + 1) % size) * size + col]
            )
    return total


def compute(settings: IsingSettings, context: Any, index: int) -> dict[str, float]:
    t = temperature(settings, index)
    beta = 1.0 / t
    size, n = settings.size, settings.size * settings.size
    rng = random.Random(settings.seed * 1_000_003 + index)
    spins = [1] * n
    for _ in range(settings.sweeps // 2):
        _sweep(spins, size, beta, rng)
    e_sum = e2_sum = m_sum = m2_sum = 0.0
    for _ in range(settings.sweeps):
        _sweep(spins, size, beta, rng)
        e, m = _energy(spins, size), abs(sum(spins))
        e_sum, e2_sum, m_sum, m2_sum = e_sum + e, e2_sum + e * e, m_sum + m, m2_sum + m * m
    k = settings.sweeps
    e_mean, m_mean = e_sum / k, m_sum / k
    return {
        "temperature": t,
        "energy": e_mean / n,
        "magnetization": m_mean / n,
        "specific_heat": (e2_sum / k - e_mean**2) * beta**2 / n,
        "susceptibility": (m2_sum / k - m_mean**2) * beta / n,
    }


def _svg(rows: list[dict[str, float]]) -> str:
    """Four small line charts of the curves against the temperature, as one SVG."""
    width, height, pad = 320, 200, 36
    temperatures = [r["temperature"] for r in rows]
    t_lo, t_hi = min(temperatures), max(temperatures)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{2 * height}">']
    for i, curve in enumerate(CURVES):
        x0, y0 = (i % 2) * width, (i // 2) * height
        values = [r[curve] for r in rows]
        v_lo, v_hi = min(values), max(values)

        def x(t: float, x0: int = x0) -> float:
            return x0 + pad + (t - t_lo) / ((t_hi - t_lo) or 1) * (width - 2 * pad)

        def y(v: float, y0: int = y0, lo: float = v_lo, hi: float = v_hi) -> float:
            return y0 + height - pad - (v - lo) / ((hi - lo) or 1) * (height - 2 * pad)

        points = " ".join(f"{x(r['temperature']):.1f},{y(r[curve]):.1f}" for r in rows)
        parts += [
            f'<rect x="{x0 + pad}" y="{y0 + pad}" width="{width - 2 * pad}" '
            f'height="{height - 2 * pad}" fill="none" stroke="#999"/>',
            f'<polyline points="{points}" fill="none" stroke="#2563eb" stroke-width="2"/>',
            f'<text x="{x0 + pad}" y="{y0 + pad - 8}" font-size="13" '
            f'font-family="sans-serif">{curve.replace("_", " ")}</text>',
            f'<text x="{x0 + width - pad}" y="{y0 + height - 12}" font-size="11" '
            f'text-anchor="end" font-family="sans-serif">T {t_lo:.2f} … {t_hi:.2f}</text>',
        ]
    parts.append("</svg>")
    return "\n".join(parts)


def merge(settings: IsingSettings, context: MergeContext) -> None:
    rows = list(context.results)
    with (context.out / "ising.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["temperature", *CURVES])
        writer.writeheader()
        writer.writerows(rows)
    (context.out / "ising.svg").write_text(_svg(rows))


TASK_TYPE = TaskType(
    name="ising",
    settings=IsingSettings,
    units=units,
    compute=compute,
    merge=merge,
    base_gb=0.1,
    per_worker_gb=0.1,
    description="2D Ising model, Metropolis Monte Carlo over a temperature sweep",
)
