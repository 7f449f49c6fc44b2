"""Benchmark: memory sizing policies replayed on real workflow traces, side by side.

    .venv/bin/python bench/sizing_replay.py TRACE.csv... [--policy NAME] [--json] [--frontier]

Each trace (Nextflow trace format, see ../shared/traces/README.md) is replayed in submission
order. Every policy keeps its own history per task type and sizes each task from the attempts
of that type that ended before the task was submitted; the attempts are then played against
the task's measured peak: an allocation below the peak is killed after the task's run time.
simrun, static and max-seen play under simrun's rules (one retry, a second kill fails the
task); doubling and vpa with unlimited retries, as the literature counts them ("vpa/1" shows
VPA under simrun's rules). Wastage as Witt et al. count it: over = (limit − peak) × time,
under = limit × time of a killed attempt, MAQ = used / (used + over + under).

A task submitted before any task of its type had ended has no history: the baselines size
it at its default; simrun from the prior of the other types (``runs.sizing.Prior``), built
from the attempts of every type that ended before the task was submitted, as for histories.

Targets: on every trace simrun wastes less than the best baseline, ≥ 25% less over all
traces, < 1 OOM retry per 100 tasks, ≤ 1 failed task per 1,000. When they are not all met,
or with ``--frontier``, the frontier of the prior's knobs (waste against retries) is printed
with the default marked.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runs.sizing import (  # noqa: E402
    BUMP,
    POLICIES,
    PRIOR_DEFAULT_TYPES,
    PRIOR_MARGIN,
    Policy,
    Prior,
    Sample,
    Simrun,
    Wastage,
    prior_from,
    wastage,
)

GIB = 2**30
MAX_ATTEMPTS = 100
"""Unlimited retries stop here: a policy that has not fit a task by then never will."""
ONE_RETRY = 1
BASELINES = ("static", "max-seen", "doubling", "vpa")
RULES: dict[str, int | None] = {
    "simrun": ONE_RETRY,
    "static": ONE_RETRY,
    "max-seen": ONE_RETRY,
    "doubling": None,
    "vpa": None,
}
"""How many retries each policy's headline figures get: None is unlimited."""
EXTRA = {"vpa/1": ("vpa", ONE_RETRY)}
"""Rows shown for information only: a baseline under simrun's rules."""
SAVING_TARGET = 25.0
RETRIES_TARGET = 1.0
FAILED_PER_1000_TARGET = 1.0


@dataclass(frozen=True)
class Task:
    """One task execution of a trace: its type, times (s), peak and static allocation (GiB)."""

    type: str
    submit: float
    complete: float
    seconds: float
    peak_gb: float
    static_gb: float


@dataclass
class Figures:
    """A policy's totals over a set of tasks."""

    tasks: int = 0
    wastage: Wastage = field(default_factory=Wastage)
    retries: int = 0
    failed: int = 0
    unseen_tasks: int = 0  # submitted before any task of their type had ended
    unseen: Wastage = field(default_factory=Wastage)  # their attempts' wastage
    retries_in_unseen: int = 0

    def add(self, other: Figures) -> None:
        self.tasks += other.tasks
        self.wastage = self.wastage + other.wastage
        self.retries += other.retries
        self.failed += other.failed
        self.unseen_tasks += other.unseen_tasks
        self.unseen = self.unseen + other.unseen
        self.retries_in_unseen += other.retries_in_unseen

    @property
    def retries_per_100(self) -> float:
        return 100 * self.retries / self.tasks if self.tasks else 0.0

    def as_json(self, rules: int | None) -> dict[str, float | int | str]:
        return {
            "tasks": self.tasks,
            "used_gbh": round(self.wastage.used_gbh, 3),
            "over_gbh": round(self.wastage.over_gbh, 3),
            "under_gbh": round(self.wastage.under_gbh, 3),
            "wasted_gbh": round(self.wastage.wasted_gbh, 3),
            "maq": round(self.wastage.maq, 4),
            "retries_per_100": round(self.retries_per_100, 3),
            "failed_tasks": self.failed,
            "rules": "one retry" if rules == ONE_RETRY else "unlimited retries",
        }


def read_trace(path: Path) -> tuple[list[Task], Counter[str]]:
    """The measurable tasks of a trace in submission order, and the skipped rows by reason."""
    tasks: list[Task] = []
    skipped: Counter[str] = Counter()
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            task, reason = parse_row(row)
            if task is None:
                skipped[reason] += 1
            else:
                tasks.append(task)
    tasks.sort(key=lambda t: t.submit)
    return tasks, skipped


def parse_row(row: dict[str, str]) -> tuple[Task | None, str]:
    """A row as a task, or None and why it cannot be replayed."""
    status = (row.get("status") or "COMPLETED").strip()
    if status != "COMPLETED":
        return None, f"status {status}"
    try:
        submit, complete = float(row["submit"]), float(row["complete"])
        realtime, peak, memory = (
            float(row["realtime"]),
            float(row["peak_rss"]),
            float(row["memory"]),
        )
    except (KeyError, TypeError, ValueError):
        return None, "a measurement missing or not a number"
    if realtime <= 0:
        return None, "run time 0"
    if peak <= 0:
        return None, "peak 0"
    if memory <= 0:
        return None, "no static allocation"
    task = Task(
        type=row["process"],
        submit=submit / 1000,
        complete=complete / 1000,
        seconds=realtime / 1000,
        peak_gb=peak / GIB,
        static_gb=memory / GIB,
    )
    return task, ""


class Histories:
    """Each task type's samples, made visible once their attempt has ended.

    Beside each type's history it keeps the type's default and its most demanding sample,
    so the prior of a type without history sees the other types' evidence of the moment.
    """

    def __init__(self) -> None:
        self.pending: list[tuple[float, int, str, Sample]] = []
        self.visible: dict[str, list[Sample]] = defaultdict(list)
        self.defaults: dict[str, float] = {}
        self.top: dict[str, Sample] = {}
        self.order = 0

    def add(self, type: str, sample: Sample, default_gb: float) -> None:
        self.order += 1
        self.defaults[type] = default_gb
        heapq.heappush(self.pending, (sample.at, self.order, type, sample))

    def before(self, type: str, at: float) -> list[Sample]:
        """The type's samples that ended before ``at``, oldest first; ``at`` never decreases."""
        while self.pending and self.pending[0][0] < at:
            _, _, ended_type, sample = heapq.heappop(self.pending)
            self.visible[ended_type].append(sample)
            top = self.top.get(ended_type)
            if top is None or need(sample) > need(top):
                self.top[ended_type] = sample
        return self.visible[type]

    def prior(self) -> Prior:
        """The prior from every type's samples visible now (a type being sized has none)."""
        return prior_from({name: (self.defaults[name], (top,)) for name, top in self.top.items()})


def need(sample: Sample) -> float:
    """What a sample says a task of its type needed: its peak, or above its kill."""
    return sample.gb * BUMP if sample.killed else sample.gb


def replay(
    tasks: Iterable[Task], policy: Policy, retries: int | None, *, prior: bool = True
) -> Figures:
    """Play every task's attempts as ``policy`` sizes them; ``retries`` None is unlimited.

    A task without history gets the prior of the other types' evidence unless ``prior`` is
    False (the policy as it was before the prior).
    """
    figures = Figures()
    histories = Histories()
    limit = MAX_ATTEMPTS if retries is None else retries + 1
    for task in tasks:
        history = histories.before(task.type, task.submit)
        given = histories.prior() if prior and not history else None
        sizing = policy.size(history, default_gb=task.static_gb, prior=given)
        figures.tasks += 1
        gb = sizing.gb
        for attempt in range(limit):
            ended = task.complete + attempt * task.seconds
            killed = gb < task.peak_gb
            spent = wastage(peak_gb=task.peak_gb, limit_gb=gb, seconds=task.seconds, killed=killed)
            figures.wastage = figures.wastage + spent
            if not history:
                figures.unseen = figures.unseen + spent
            sample = Sample(gb if killed else task.peak_gb, killed, ended)
            histories.add(task.type, sample, task.static_gb)
            if not killed:
                break
            if attempt + 1 == limit:
                figures.failed += 1
                break
            figures.retries += 1
            gb = (
                sizing.retry_gb
                if attempt == 0
                else policy.retry(history, killed_gb=gb, default_gb=task.static_gb)
            )
        if not history:
            figures.unseen_tasks += 1
            figures.retries_in_unseen += attempt
    return figures


def cold_waste(tasks: Sequence[Task]) -> float:
    """Static waste of the tasks no type history exists for at submission: every policy's floor."""
    total = 0.0
    first_end: dict[str, float] = {}
    for task in tasks:
        first_end[task.type] = min(first_end.get(task.type, task.complete), task.complete)
    for task in tasks:
        if task.submit <= first_end[task.type]:
            over = wastage(
                peak_gb=task.peak_gb, limit_gb=task.static_gb, seconds=task.seconds, killed=False
            )
            total += over.over_gbh
    return total


def saving(figures: dict[str, Figures]) -> tuple[str, float] | None:
    """The best baseline and simrun's saving against it in %, when both were replayed."""
    baselines = {name: f.wastage.wasted_gbh for name, f in figures.items() if name in BASELINES}
    if "simrun" not in figures or not baselines:
        return None
    best = min(baselines, key=lambda name: baselines[name])
    if baselines[best] == 0:
        return best, 0.0
    return best, 100 * (1 - figures["simrun"].wastage.wasted_gbh / baselines[best])


def table(title: str, figures: dict[str, Figures]) -> str:
    """One trace's (or the total's) figures, a column per policy."""
    names = list(figures)
    rows: list[tuple[str, Callable[[Figures], str]]] = [
        ("tasks", lambda f: f"{f.tasks}"),
        ("used GiB·h", lambda f: f"{f.wastage.used_gbh:.1f}"),
        ("over GiB·h", lambda f: f"{f.wastage.over_gbh:.1f}"),
        ("under GiB·h", lambda f: f"{f.wastage.under_gbh:.1f}"),
        ("wasted GiB·h", lambda f: f"{f.wastage.wasted_gbh:.1f}"),
        ("MAQ", lambda f: f"{f.wastage.maq:.3f}"),
        ("OOM retries/100", lambda f: f"{f.retries_per_100:.2f}"),
        ("failed tasks", lambda f: f"{f.failed}"),
        ("no-history tasks", lambda f: f"{f.unseen_tasks}"),
        ("  wasted GiB·h", lambda f: f"{f.unseen.wasted_gbh:.1f}"),
        ("  OOM retries", lambda f: f"{f.retries_in_unseen}"),
    ]
    width = 11
    lines = [f"== {title}", f"{'':17}" + "".join(f"{n:>{width}}" for n in names)]
    lines.append(
        f"{'retries':17}"
        + "".join(f"{'1' if rules_of(n) == ONE_RETRY else 'unlimited':>{width}}" for n in names)
    )
    for label, cell in rows:
        lines.append(f"{label:17}" + "".join(f"{cell(figures[n]):>{width}}" for n in names))
    result = saving(figures)
    if result is not None:
        best, percent = result
        lines.append(
            f"simrun saves {percent:.1f}% of the wasted GiB·h of the best baseline ({best})"
        )
        lines.append(
            "no-history tasks were submitted before any task of their type had ended: the "
            "baselines size them at the default, simrun from the other types' prior"
        )
        parts: list[tuple[str, Callable[[Figures], float]]] = [
            ("no-history tasks", lambda f: f.unseen.wasted_gbh),
            ("tasks with a history", lambda f: f.wastage.wasted_gbh - f.unseen.wasted_gbh),
        ]
        for what, part in parts:
            own, theirs = part(figures["simrun"]), part(figures[best])
            if theirs > 0:
                change = 100 * (own / theirs - 1)
                lines.append(
                    f"on the {what}: simrun {own:.1f} against {theirs:.1f} GiB·h "
                    f"({abs(change):.1f}% {'more' if change > 0 else 'less'})"
                )
    return "\n".join(lines)


def rules_of(name: str) -> int | None:
    return EXTRA[name][1] if name in EXTRA else RULES[name]


def run_all(
    traces: dict[str, list[Task]], names: Sequence[str]
) -> tuple[dict[str, dict[str, Figures]], dict[str, Figures]]:
    """Every named policy (or extra row) on every trace, and their totals."""
    per_trace: dict[str, dict[str, Figures]] = {}
    total: dict[str, Figures] = {name: Figures() for name in names}
    for stem, tasks in traces.items():
        per_trace[stem] = {}
        for name in names:
            policy = POLICIES[EXTRA[name][0]] if name in EXTRA else POLICIES[name]
            figures = replay(tasks, policy, rules_of(name))
            per_trace[stem][name] = figures
            total[name].add(figures)
    return per_trace, total


def targets(per_trace: dict[str, dict[str, Figures]], total: dict[str, Figures]) -> list[str]:
    """The targets as lines 'met'/'missed' with their figures."""
    lines = []
    for stem, figures in per_trace.items():
        result = saving(figures)
        if result:
            verdict = "met" if result[1] > 0 else "MISSED"
            lines.append(
                f"{verdict}: less waste than the best baseline on {stem} ({result[1]:.1f}%)"
            )
    result = saving(total)
    if result:
        verdict = "met" if result[1] >= SAVING_TARGET else "MISSED"
        lines.append(
            f"{verdict}: ≥ {SAVING_TARGET:g}% less waste over all traces ({result[1]:.1f}%)"
        )
    simrun = total["simrun"]
    verdict = "met" if simrun.retries_per_100 < RETRIES_TARGET else "MISSED"
    lines.append(
        f"{verdict}: < {RETRIES_TARGET:g} OOM retry per 100 tasks ({simrun.retries_per_100:.2f})"
    )
    per_1000 = 1000 * simrun.failed / simrun.tasks if simrun.tasks else 0.0
    verdict = "met" if per_1000 <= FAILED_PER_1000_TARGET else "MISSED"
    lines.append(f"{verdict}: ≤ {FAILED_PER_1000_TARGET:g} failed task per 1,000 ({per_1000:.2f})")
    return lines


FRONTIER_MARGINS = (1.25, PRIOR_MARGIN, 2.0)
FRONTIER_DEFAULT_TYPES = (8, 10, PRIOR_DEFAULT_TYPES, 16, 24)


def frontier(traces: dict[str, list[Task]]) -> list[str]:
    """simrun's waste against its retries over the prior's knobs, and without the prior."""
    default = Simrun()
    lines = [
        "frontier of simrun over all traces",
        "  prior margin  default types → wasted GiB·h  retries/100  failed",
    ]
    knobs: list[tuple[float, int | None]] = [
        (m, k) for m in FRONTIER_MARGINS for k in FRONTIER_DEFAULT_TYPES
    ]
    for margin, weight in [*knobs, (PRIOR_MARGIN, None)]:
        policy = Simrun(prior_margin=margin, prior_default_types=weight or PRIOR_DEFAULT_TYPES)
        figures = Figures()
        for tasks in traces.values():
            figures.add(replay(tasks, policy, ONE_RETRY, prior=weight is not None))
        mark = "  ← default" if policy == default and weight is not None else ""
        shown = ("no prior", "") if weight is None else (f"{margin:g}", f"{weight}")
        lines.append(
            f"  {shown[0]:<13} {shown[1]:<13} → {figures.wastage.wasted_gbh:12.1f} "
            f"{figures.retries_per_100:12.2f} {figures.failed:7d}{mark}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path, metavar="TRACE.csv")
    parser.add_argument("--policy", choices=sorted(POLICIES), help="replay this policy only")
    parser.add_argument("--json", action="store_true", help="print one JSON object for tools")
    parser.add_argument(
        "--frontier", action="store_true", help="print the frontier of the prior's knobs"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    traces: dict[str, list[Task]] = {}
    skipped: dict[str, Counter[str]] = {}
    for path in args.traces:
        if not path.is_file():
            print(f"{path}: no such file.", file=sys.stderr)
            return 2
        traces[path.stem], skipped[path.stem] = read_trace(path)
    names = [args.policy] if args.policy else [*RULES, *EXTRA]
    per_trace, total = run_all(traces, names)
    if args.json:
        headline = [n for n in names if n in RULES]
        print(
            json.dumps(
                {
                    "traces": {
                        stem: {n: figures[n].as_json(RULES[n]) for n in headline}
                        for stem, figures in per_trace.items()
                    },
                    "total": {n: total[n].as_json(RULES[n]) for n in headline},
                    "skipped": {stem: dict(c) for stem, c in skipped.items()},
                },
                indent=2,
            )
        )
        return 0
    for stem, figures in per_trace.items():
        reasons = ", ".join(f"{n} {why}" for why, n in skipped[stem].most_common()) or "none"
        print(f"{stem}: {len(traces[stem])} tasks replayed; rows skipped: {reasons}")
        print(table(stem, figures))
        print()
    cold = sum(cold_waste(tasks) for tasks in traces.values())
    plural = "s" if len(traces) > 1 else ""
    print(table(f"total of {len(traces)} trace{plural}", total))
    if "simrun" in names and len(names) > 1:
        lines = targets(per_trace, total)
        print()
        print("\n".join(lines))
        result = saving(total)
        if result is not None and total[result[0]].wastage.wasted_gbh > 0:
            ceiling = 100 * (1 - cold / total[result[0]].wastage.wasted_gbh)
            print(
                f"ceiling without a prior: a policy that sized a type's first tasks at the "
                f"default and every other task at its exact peak would save {ceiling:.1f}%"
            )
        if args.frontier or any(line.startswith("MISSED") for line in lines):
            print()
            print("\n".join(frontier(traces)))
    print(f"\nelapsed {time.perf_counter() - started:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
