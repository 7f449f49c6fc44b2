"""Benchmark: memory sizing policies replayed on real workflow traces, side by side.

    .venv/bin/python bench/sizing_replay.py TRACE.csv... [--policy NAME] [--json]
    .venv/bin/python bench/sizing_replay.py --cross-validate TRACE.csv TRACE.csv TRACE.csv...
    .venv/bin/python bench/sizing_replay.py --first-tasks TRACE.csv TRACE.csv TRACE.csv...

Each trace (Nextflow trace format, see ../shared/traces/README.md) is replayed in submission
order. Every policy keeps its own history per task type and sizes each task from the attempts
of that type that ended before the task was submitted (a kill is evidence from the end of the
killed attempt, as the product records it); the attempts are then played against the task's
measured peak: an allocation below the peak is killed after the task's run time.

simrun is planned by the product's own function, ``runs.planning.planner.plan_task``: the newest
``OBSERVATIONS_USED`` observations of the type, the prior of the other types, the type's
largest needs of all time, the planner's rounding (0.05 GiB) and its retry memory; so the
figure printed is the product's. The baselines are sized by their policies as the literature
states them: static, max-seen (one retry), doubling and vpa (unlimited retries), p95-1retry
(p95 × 1.25, one retry at 2×) and vpa-1retry (VPA under simrun's one-retry rule). The oracle
sizes the first task of each type at its default (at its peak when that is larger: it is
never killed) and every later task at its exact peak: no policy can waste less; "gap closed"
is how much of the distance from the best baseline to the oracle a policy covers.

Wastage as Witt et al. count it: over = (limit − peak) × time, under = limit × time of a
killed attempt, MAQ = used / (used + over + under).

Targets, on each trace: at most 1 failed task per 1,000, fewer than 2 OOM retries per 100
tasks, less waste than the best baseline; over all traces ≥ 25% less waste than it.
``--cross-validate`` chooses every constant of simrun's that trades waste against kills
(``bench/sizing_constants.py``), fold by fold: on all traces but one, one constant at a time
(the fewest retries on the worst trace first, then the most saving on it), scored on the one
left out, with each target said met or MISSED per fold and over the folds; the shipped
defaults must be the point chosen that way on every trace given. ``--first-tasks``
cross-validates the prior's constants on the tasks planned without history alone
(``bench/first_tasks.py``), ``--margins`` the margins that follow a type's spread. All hold
one trace out by the one procedure of ``bench/cross_validation.py``, and need two traces.
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

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.tasktypes import TaskType  # noqa: E402
from runs.planning import planner  # noqa: E402
from runs.planning.peak_model import Features, features_of  # noqa: E402
from runs.planning.sizing import (  # noqa: E402
    BUMP,
    POLICIES,
    Simrun,
    Wastage,
    need,
    prior_from,
    wastage,
)
from runs.planning.sizing_base import Policy, Prior, Sample  # noqa: E402
from runs.planning.spec import TaskSpec  # noqa: E402

GIB = 2**30
MAX_ATTEMPTS = 100
"""Unlimited retries stop here: a policy that has not fit a task by then never will."""
ONE_RETRY = 1
BASELINES = ("static", "max-seen", "doubling", "vpa", "p95-1retry", "vpa-1retry")
INPUT_BLIND = "input-blind"
"""simrun planned without the tasks' input bytes: what it does where none are known."""
RULES: dict[str, tuple[str, int | None]] = {
    "simrun": ("simrun", ONE_RETRY),
    INPUT_BLIND: ("simrun", ONE_RETRY),
    "static": ("static", ONE_RETRY),
    "max-seen": ("max-seen", ONE_RETRY),
    "doubling": ("doubling", None),
    "vpa": ("vpa", None),
    "p95-1retry": ("p95-1retry", ONE_RETRY),
    "vpa-1retry": ("vpa", ONE_RETRY),
}
"""Each column: the policy that sizes it and how many retries it gets (None: unlimited)."""
ORACLE = "oracle"
INPUTS_SAID = (
    "simrun is told each task's cores and the bytes it read (the trace's rchar, else its "
    "read_bytes), which stand for the size of its input; input-blind is simrun told its "
    "cores only. The baselines are told nothing."
)
NEAR_MISS = 1.1
"""A first attempt planned under this × its task's peak was a close call, killed or not: the
next sample of a type may need 10% more (``peak_model.SPREAD_FLOOR``'s note)."""
SAVING_TARGET = 25.0
RETRIES_TARGET = 2.0
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
    cores: float = 1.0
    input_bytes: float | None = None  # rchar (else read_bytes): stands for the input's size

    def features(self, *, inputs: bool = True) -> Features:
        """What the planner is told of the task: its cores and, unless input-blind, the
        bytes it read, standing for the size of its input (which a real planner knows where
        the input exists before the task runs)."""
        known: dict[str, float] = {planner.CORES: self.cores}
        if inputs and self.input_bytes is not None:
            known[planner.INPUT_BYTES] = self.input_bytes
        return features_of(known)


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
    close_in_unseen: int = 0  # their first attempts planned under NEAR_MISS × their peak

    def add(self, other: Figures) -> None:
        self.tasks += other.tasks
        self.wastage = self.wastage + other.wastage
        self.retries += other.retries
        self.failed += other.failed
        self.unseen_tasks += other.unseen_tasks
        self.unseen = self.unseen + other.unseen
        self.retries_in_unseen += other.retries_in_unseen
        self.close_in_unseen += other.close_in_unseen

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
            "no_history_tasks": self.unseen_tasks,
            "no_history_wasted_gbh": round(self.unseen.wasted_gbh, 3),
            "no_history_retries": self.retries_in_unseen,
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
        cores=_number(row.get("cpus")) or 1.0,
        input_bytes=_number(row.get("rchar")) or _number(row.get("read_bytes")),
    )
    return task, ""


def _number(text: str | None) -> float | None:
    """A trace's field as a positive number, None for '-', empty or not a number."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if value > 0 and value == value else None


class Histories:
    """Each task type's samples, made visible once their attempt has ended.

    Beside each type's history it keeps the type's default and its most demanding sample,
    so the prior of a type without history sees the other types' evidence of the moment, and
    the retry sees the type's largest need of all time (the product reads both from
    ``runs.planning.evidence``).
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

    def prior(self, bump: float = BUMP) -> Prior:
        """The prior from every type's samples visible now (a type being sized has none), a
        kill counted × ``bump`` (the policy's)."""
        others = {name: (self.defaults[name], (top,)) for name, top in self.top.items()}
        return prior_from(others, bump)


class _Settings(BaseModel):
    pass


class ProductPlanner:
    """simrun as the product plans it: ``runs.planning.planner.plan_task`` for a one-process task of
    the trace's type, whose default is the trace's static allocation."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.types: dict[tuple[str, float], tuple[TaskSpec, TaskType]] = {}

    def __call__(
        self, task: Task, history: Sequence[Sample], histories: Histories, features: Features
    ) -> tuple[float, float]:
        key = (task.type, task.static_gb)
        if key not in self.types:
            task_type = TaskType(
                name=task.type,
                settings=_Settings,
                command=lambda _: ["true"],
                base_gb=0.0,
                per_worker_gb=task.static_gb,
            )
            self.types[key] = (TaskSpec.model_construct(type=task.type), task_type)
        spec, task_type = self.types[key]
        observed = [
            planner.ObservedPeak(s.gb, oom=s.killed, at=s.at, features=s.features)
            for s in reversed(history[-getattr(self.policy, "window", planner.OBSERVATIONS_USED) :])
        ]
        top = histories.top.get(task.type)
        plan = planner.plan_task(
            spec,
            task_type,
            observed,
            prior=None if history else histories.prior(getattr(self.policy, "bump", BUMP)),
            shown=() if top is None else (top,),
            policy=self.policy,
            counterfactual=False,
            features=features,
        )
        return plan.memory_gb, plan.retry_memory_gb


Sizer = Callable[[Task, Sequence[Sample], Histories, Features], tuple[float, float]]


def sizer_of(policy: Policy) -> Sizer:
    """How a column sizes a task: simrun's through the planner, a baseline's by its policy."""
    if isinstance(policy, Simrun):
        return ProductPlanner(policy)

    def size(
        task: Task, history: Sequence[Sample], histories: Histories, features: Features
    ) -> tuple[float, float]:
        sized = policy.size(history, default_gb=task.static_gb)
        return sized.gb, sized.retry_gb

    return size


def replay(
    tasks: Iterable[Task],
    policy: Policy,
    retries: int | None,
    *,
    inputs: bool = True,
    sizer: Sizer | None = None,
) -> Figures:
    """Play every task's attempts as ``policy`` sizes them; ``retries`` None is unlimited;
    ``inputs`` False hides the tasks' input bytes from it (the input-blind column); ``sizer``
    sizes the first attempts instead of ``sizer_of(policy)``."""
    figures = Figures()
    histories = Histories()
    sizer = sizer or sizer_of(policy)
    limit = MAX_ATTEMPTS if retries is None else retries + 1
    for task in tasks:
        history = histories.before(task.type, task.submit)
        features = task.features(inputs=inputs)
        gb, retry_gb = sizer(task, history, histories, features)
        figures.tasks += 1
        if not history and gb < NEAR_MISS * task.peak_gb:
            figures.close_in_unseen += 1
        for attempt in range(limit):
            ended = task.complete + attempt * task.seconds
            killed = gb < task.peak_gb
            spent = wastage(peak_gb=task.peak_gb, limit_gb=gb, seconds=task.seconds, killed=killed)
            figures.wastage = figures.wastage + spent
            if not history:
                figures.unseen = figures.unseen + spent
            sample = Sample(gb if killed else task.peak_gb, killed, ended, features)
            histories.add(task.type, sample, task.static_gb)
            if not killed:
                break
            if attempt + 1 == limit:
                figures.failed += 1
                break
            figures.retries += 1
            gb = (
                retry_gb
                if attempt == 0
                else policy.retry(history, killed_gb=gb, default_gb=task.static_gb)
            )
        if not history:
            figures.unseen_tasks += 1
            figures.retries_in_unseen += attempt
    return figures


def replay_oracle(tasks: Sequence[Task]) -> Figures:
    """The oracle bound: a type's first task at its default (at its peak if that is larger,
    never killed), every later task at its exact peak; its waste is the first tasks' over."""
    figures = Figures()
    seen: set[str] = set()
    first_end: dict[str, float] = {}
    for task in tasks:
        first_end[task.type] = min(first_end.get(task.type, task.complete), task.complete)
    for task in tasks:
        unseen = first_end[task.type] >= task.submit
        limit = task.peak_gb if task.type in seen else max(task.static_gb, task.peak_gb)
        seen.add(task.type)
        spent = wastage(peak_gb=task.peak_gb, limit_gb=limit, seconds=task.seconds, killed=False)
        figures.tasks += 1
        figures.wastage = figures.wastage + spent
        if unseen:
            figures.unseen_tasks += 1
            figures.unseen = figures.unseen + spent
    return figures


def figures_of(name: str, tasks: Sequence[Task], policy: Policy | None = None) -> Figures:
    """One column's figures on one trace (``policy`` replaces simrun's, for the grid)."""
    if name == ORACLE:
        return replay_oracle(tasks)
    policy_name, retries = RULES[name]
    return replay(tasks, policy or POLICIES[policy_name], retries, inputs=name != INPUT_BLIND)


def best_baseline(figures: dict[str, Figures]) -> str | None:
    """The baseline that wastes least among those replayed that fail no task (among all of
    them if each fails some): one that fails tasks stops spending on them, which is no
    saving a scientist would take."""
    replayed = {n: f for n, f in figures.items() if n in BASELINES}
    safe = {n: f for n, f in replayed.items() if f.failed == 0} or replayed
    return min(safe, key=lambda n: safe[n].wastage.wasted_gbh) if safe else None


def best_baselines(traces: dict[str, list[Task]]) -> tuple[dict[str, Figures], dict[str, str]]:
    """Each trace's best baseline (``best_baseline``): its figures and its name, by trace."""
    best: dict[str, Figures] = {}
    names: dict[str, str] = {}
    for stem, tasks in traces.items():
        columns = {name: figures_of(name, tasks) for name in BASELINES}
        names[stem] = best_baseline(columns) or ""
        best[stem] = columns[names[stem]]
    return best, names


def saving(own: Figures, best: Figures) -> float:
    """How much less a policy wastes than the best baseline, in %."""
    theirs = best.wastage.wasted_gbh
    return 100 * (1 - own.wastage.wasted_gbh / theirs) if theirs > 0 else 0.0


def gap_closed(figures: dict[str, Figures], name: str) -> float | None:
    """The share of the gap between the best baseline and the oracle a policy closes, in %."""
    best = best_baseline(figures)
    if best is None or ORACLE not in figures:
        return None
    gap = figures[best].wastage.wasted_gbh - figures[ORACLE].wastage.wasted_gbh
    if gap <= 0:
        return None
    return 100 * (figures[best].wastage.wasted_gbh - figures[name].wastage.wasted_gbh) / gap


def per_1000(figures: Figures) -> float:
    return 1000 * figures.failed / figures.tasks if figures.tasks else 0.0


def table(title: str, figures: dict[str, Figures]) -> str:
    """One trace's (or the total's) figures, a column per policy."""
    names = list(figures)

    def gap(name: str) -> str:
        closed = gap_closed(figures, name)
        return "" if closed is None or name == ORACLE else f"{closed:.1f}"

    rows: list[tuple[str, Callable[[str], str]]] = [
        ("tasks", lambda n: f"{figures[n].tasks}"),
        ("used GiB·h", lambda n: f"{figures[n].wastage.used_gbh:.1f}"),
        ("over GiB·h", lambda n: f"{figures[n].wastage.over_gbh:.1f}"),
        ("under GiB·h", lambda n: f"{figures[n].wastage.under_gbh:.1f}"),
        ("wasted GiB·h", lambda n: f"{figures[n].wastage.wasted_gbh:.1f}"),
        ("MAQ", lambda n: f"{figures[n].wastage.maq:.3f}"),
        ("OOM retries/100", lambda n: f"{figures[n].retries_per_100:.2f}"),
        ("failed tasks", lambda n: f"{figures[n].failed}"),
        ("gap closed %", gap),
        ("no-history tasks", lambda n: f"{figures[n].unseen_tasks}"),
        ("  wasted GiB·h", lambda n: f"{figures[n].unseen.wasted_gbh:.1f}"),
    ]
    width = 12
    lines = [f"== {title}", f"{'':17}" + "".join(f"{n:>{width}}" for n in names)]
    lines.append(f"{'retries':17}" + "".join(f"{retries_label(n):>{width}}" for n in names))
    for label, cell in rows:
        lines.append(f"{label:17}" + "".join(f"{cell(n):>{width}}" for n in names))
    best = best_baseline(figures)
    if best is not None and "simrun" in figures:
        percent = saving(figures["simrun"], figures[best])
        lines.append(
            f"simrun saves {percent:.1f}% of the wasted GiB·h of the best baseline ({best})"
        )
    return "\n".join(lines)


def retries_label(name: str) -> str:
    if name == ORACLE:
        return "none"
    return "1" if RULES[name][1] == ONE_RETRY else "unlimited"


def run_all(
    traces: dict[str, list[Task]], names: Sequence[str]
) -> tuple[dict[str, dict[str, Figures]], dict[str, Figures]]:
    """Every named column on every trace, and their totals."""
    per_trace: dict[str, dict[str, Figures]] = {}
    total: dict[str, Figures] = {name: Figures() for name in names}
    for stem, tasks in traces.items():
        per_trace[stem] = {}
        for name in names:
            figures = figures_of(name, tasks)
            per_trace[stem][name] = figures
            total[name].add(figures)
    return per_trace, total


def targets(per_trace: dict[str, dict[str, Figures]], total: dict[str, Figures]) -> list[str]:
    """The targets as lines 'met'/'MISSED' with their figures."""
    lines = []
    for stem, figures in per_trace.items():
        lines.extend(trace_targets(stem, figures["simrun"], figures))
    best = best_baseline(total)
    if best is not None:
        percent = saving(total["simrun"], total[best])
        verdict = "met" if percent >= SAVING_TARGET else "MISSED"
        lines.append(
            f"{verdict}: ≥ {SAVING_TARGET:g}% less waste than the best baseline over all "
            f"traces ({percent:.1f}% less than {best}"
            + (
                f", {saving(total['simrun'], total['vpa']):.1f}% less than vpa)"
                if "vpa" in total
                else ")"
            )
        )
    return lines


def trace_targets(stem: str, simrun: Figures, figures: dict[str, Figures]) -> list[str]:
    """One trace's targets: failed tasks, retries, less waste than its best baseline."""
    failed = per_1000(simrun)
    lines = [
        f"{'met' if failed <= FAILED_PER_1000_TARGET else 'MISSED'}: ≤ "
        f"{FAILED_PER_1000_TARGET:g} failed task per 1,000 on {stem} ({failed:.2f})",
        f"{'met' if simrun.retries_per_100 < RETRIES_TARGET else 'MISSED'}: < "
        f"{RETRIES_TARGET:g} OOM retry per 100 tasks on {stem} ({simrun.retries_per_100:.2f})",
    ]
    best = best_baseline(figures)
    if best is not None:
        percent = saving(simrun, figures[best])
        lines.append(
            f"{'met' if percent > 0 else 'MISSED'}: less waste than the best baseline on "
            f"{stem} ({percent:.1f}% less than {best})"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path, metavar="TRACE.csv")
    parser.add_argument("--policy", choices=[*RULES, ORACLE], help="replay this column only")
    parser.add_argument("--json", action="store_true", help="print one JSON object for tools")
    parser.add_argument(
        "--cross-validate",
        action="store_true",
        help="choose every constant fold by fold (fit on all traces but one, score it)",
    )
    parser.add_argument(
        "--first-tasks",
        action="store_true",
        help="cross-validate the prior's constants on the tasks planned without history",
    )
    parser.add_argument(
        "--margins",
        action="store_true",
        help="cross-validate the margins that follow a type's own spread (bench/margins.py)",
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
    if (args.cross_validate or args.first_tasks or args.margins) and len(traces) < 2:
        print("cross-validation holds one trace out: give two traces at least.", file=sys.stderr)
        return 2
    if args.first_tasks:
        from bench import first_tasks

        print("\n".join(first_tasks.cross_validate(traces)))
        print(f"\nelapsed {time.perf_counter() - started:.2f} s")
        return 0
    if args.margins:
        from bench import margins

        print("\n".join(margins.cross_validate(traces)))
        print(f"\nelapsed {time.perf_counter() - started:.2f} s")
        return 0
    if args.cross_validate:
        from bench import sizing_constants

        paths = {path.stem: path for path in args.traces}
        print("\n".join(sizing_constants.cross_validate(paths, traces)))
        print(f"\nelapsed {time.perf_counter() - started:.2f} s")
        return 0
    names = [args.policy] if args.policy else [*RULES, ORACLE]
    per_trace, total = run_all(traces, names)
    if args.json:

        def column(figures: dict[str, Figures], name: str) -> dict[str, float | int | str | None]:
            found: dict[str, float | int | str | None] = dict(
                figures[name].as_json(None if name == ORACLE else RULES[name][1])
            )
            if name == ORACLE:
                found["rules"] = "never killed"
            closed = gap_closed(figures, name)
            found["gap_closed_percent"] = None if closed is None else round(closed, 2)
            return found

        def answer(figures: dict[str, Figures]) -> dict[str, object]:
            return {
                **{n: column(figures, n) for n in names},
                "best_baseline": best_baseline(figures),
            }

        print(
            json.dumps(
                {
                    "traces": {stem: answer(f) for stem, f in per_trace.items()},
                    "total": answer(total),
                    "skipped": {stem: dict(c) for stem, c in skipped.items()},
                },
                indent=2,
            )
        )
        return 0
    print(INPUTS_SAID)
    print()
    for stem, figures in per_trace.items():
        reasons = ", ".join(f"{n} {why}" for why, n in skipped[stem].most_common()) or "none"
        print(f"{stem}: {len(traces[stem])} tasks replayed; rows skipped: {reasons}")
        print(table(stem, figures))
        print()
    plural = "s" if len(traces) > 1 else ""
    print(table(f"total of {len(traces)} trace{plural}", total))
    if "simrun" in names and len(names) > 1:
        print()
        print("\n".join(targets(per_trace, total)))
    print(f"\nelapsed {time.perf_counter() - started:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
