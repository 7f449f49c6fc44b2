"""The planner: a task's cores, memory and workers from its spec, its type and observations.

Pure functions, no database and no I/O: the caller passes the observations it read. A task's
memory is ``base_gb + processes × per_worker_gb``; ``per_worker_gb`` comes from the spec if
given, else from the sizing policy (``runs.planning.sizing``) over the observations of its type:
clean peaks and kills, a kill counting as evidence from the first one on; with no observation, the
type's default. The retry memory, for the one retry after a kill for memory, is the larger of
``RETRY_FACTOR`` times the memory and what the policy gives a retry. See docs/memory.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.programs import program_name, program_path
from harness.sweep import SWEEP_TYPE
from harness.tasktypes import TaskType
from runs.backends.base import TaskPlan
from runs.planning import sizing, sizing_base
from runs.planning.peak_model import Features, features_of
from runs.planning.spec import RunSpec, TaskSpec, sweep_settings, type_name

RETRY_FACTOR = 2.0
"""The retry memory is at least this many times the memory."""
COUNTERFACTUAL = ("simrun", "vpa")
"""The policies whose allocation of each task is kept beside its plan, to show what sizing
saves: simrun's own (which a spec's memory overrides) and Kubernetes' VPA recommender's."""
DEFAULT_SPLIT_CORES = 2
DEFAULT_UNSPLIT_CORES = 1
DEFAULT_COMMAND_GB = 1.0
MIN_PER_WORKER_GB = 0.05
OBSERVATIONS_USED = sizing.WINDOW
"""The latest observations of a key the planner reads (``runs/planning/submission.py``), the
policy's window: the replay benchmark hands the planner the same."""
GB_STEP = 0.05
"""Memory is rounded up to this step, so plans read well and pods get tidy limits."""


@dataclass(frozen=True)
class ObservedPeak:
    """One observation as the planner needs it: peak GiB per process (the limit per process
    for a kill), whether it was a kill, and when it was made (seconds since the epoch)."""

    gb_per_process: float
    oom: bool = False
    at: float = 0.0
    features: Features = ()


KEY_LENGTH = 100
"""The length of ``Observation.task_type``: a longer command key is cut there."""
SWEEP_PREFIX = "sweep:"
"""The observations of a command sweep are its program's: ``sweep:<program>``, and
``sweep:<program>@<path digest>`` when the command says which file it is."""
PATH_DIGEST = 12
"""The hex digits of the digest of a program's path in its key (48 bits: two paths sharing one
is too unlikely to plan for)."""


@dataclass(frozen=True)
class PerWorker:
    """The GiB per process of a task, the GiB per process of its retry, and why."""

    gb: float
    retry_gb: float
    why: str
    short: str = ""
    """One plain clause, ``{subject}`` and ``{per}`` left open (``sizing_base.Sizing.short``)."""


def observation_key(
    *, task_type: str, run_name: str, task_id: str, command: Sequence[str] = ()
) -> str:
    """What the observations of a task are stored and read under.

    A task type's name; for a command task ``command:<run name>/<task id>``, so the same task
    of a workflow submitted again learns from its earlier runs. A command task of a run
    without a name has no key ("") and is planned at the default. A command sweep's is
    ``sweep:<program>`` (``harness.programs.program_name``), with ``@`` and a digest of the
    program's absolute path when the command says it (``harness.programs.program_path``): every
    sweep of a file learns from the others, whatever its run or task, and two files of one name
    (two projects' ``run.sh``) are two histories. The path, not the content, is keyed: the key
    is known from the command alone, the same when the task is planned and when it is observed,
    and a script edited keeps its history.
    """
    if task_type == SWEEP_TYPE and command:
        name = f"{SWEEP_PREFIX}{program_name(command)}"
        if (path := program_path(command)) is None:
            return name[:KEY_LENGTH]
        digest = hashlib.sha256(path.encode()).hexdigest()[:PATH_DIGEST]
        return f"{name[: KEY_LENGTH - PATH_DIGEST - 1]}@{digest}"
    if task_type:
        return task_type
    return f"command:{run_name}/{task_id}"[:KEY_LENGTH] if run_name else ""


def subject_of(task: TaskSpec, task_type: TaskType | None, command: str) -> str:
    """What a plan's reasons name: the type, a sweep's program, or ``command`` for a command."""
    if task_type is not None and task_type.name == SWEEP_TYPE and task.command:
        return program_name(task.command)
    return task_type.name if task_type is not None else command


def round_gb(gb: float) -> float:
    """Round up to the memory step."""
    return round(math.ceil(gb / GB_STEP - 1e-9) * GB_STEP, 2)


def processes(cores: int, memory_gb: float | None, base_gb: float, per_worker_gb: float) -> int:
    """``min(cores, floor((memory − base) / per_worker))``, at least 1: the harness's formula."""
    if memory_gb is None:
        return max(1, cores)
    fit = math.floor((memory_gb - base_gb) / per_worker_gb + 1e-9)
    return max(1, min(cores, fit))


def observation_keys(spec: RunSpec) -> dict[str, str]:
    """The observation key of every task of a spec, by task id ("" for none)."""
    return {
        task_id: observation_key(
            task_type=type_name(task) or "",
            run_name=spec.name,
            task_id=task_id,
            command=task.command or (),
        )
        for task_id, task in spec.tasks.items()
    }


UNITS = "units"
CORES = "cores"
INPUT_BYTES = "input_bytes"
"""The features of a task besides its numeric settings: its units, its cores, and the
bytes of its inputs (known where they exist: the replay's traces; a run's inputs are
outputs of its own tasks, not written when it is planned)."""


MAX_SETTINGS_FEATURES = 12
"""At most this many numeric settings of a task are features (the first by name): each is
kept on every observation of it and compared at every plan of its type."""


def task_features(task: TaskSpec, task_type: TaskType | None, cores: int) -> Features:
    """What is known of a task when it is planned: its numeric settings (at most
    ``MAX_SETTINGS_FEATURES``; a setting named as one of the others is left out), its units
    (a split task's, as its type counts them from its settings) and its cores."""
    numeric = features_of(
        {
            name: value
            for name, value in (task.settings or {}).items()
            if name not in (UNITS, CORES, INPUT_BYTES)
        }
    )
    known: dict[str, object] = dict(numeric[:MAX_SETTINGS_FEATURES])
    known[CORES] = cores
    if task_type is not None and task_type.splittable and task_type.units is not None:
        try:
            raw = sweep_settings(task) if task.sweep is not None else task.settings or {}
            known[UNITS] = task_type.units(task_type.parse_settings(raw))
        except (ValueError, TypeError, RuntimeError, KeyError, AssertionError):
            pass  # a type that cannot count here (one the sources ship) has no units feature
    return features_of(known)


def history(
    observed: Sequence[ObservedPeak], window: int = OBSERVATIONS_USED
) -> list[sizing_base.Sample]:
    """The observations, newest first as read, as the policy's history: the newest
    ``window`` (the policy's, ``OBSERVATIONS_USED`` for the product's), oldest first."""
    samples = [
        sizing_base.Sample(o.gb_per_process, killed=o.oom, at=o.at, features=o.features)
        for o in observed
    ]
    return sorted(samples, key=lambda s: s.at)[-window:]


def per_worker_memory(
    task: TaskSpec,
    task_type: TaskType | None,
    observed: Sequence[ObservedPeak],
    prior: sizing_base.Prior | None = None,
    *,
    shown: Sequence[sizing_base.Sample] = (),
    policy: sizing_base.Policy = sizing.DEFAULT,
    features: Features = (),
) -> PerWorker:
    """The GiB per process of a task and of its retry, and where they came from.

    From the spec if it says; else from the sizing policy over the observations (a command
    task's are those of its key); before any, from the type's default (a command's 1 GiB),
    lowered by the ``prior`` of the other types when it has any. ``shown`` are the key's
    largest needs of all time (``runs.planning.evidence``), which the retry never goes below.
    """
    default = task_type.per_worker_gb if task_type is not None else DEFAULT_COMMAND_GB
    past = history(observed, getattr(policy, "window", OBSERVATIONS_USED))
    if task.memory is not None and task.memory.per_worker_gb is not None:
        gb = task.memory.per_worker_gb
        retry = policy.retry([*past, *shown], killed_gb=gb, default_gb=default)
        why = f"per-worker memory {gb:g} GiB from the spec"
        return PerWorker(gb, retry, why, "the run's spec sets {subject} " + f"{gb:g} GiB{{per}}")
    what = subject_of(task, task_type, "the command")
    given = prior if prior is not None and prior.types else None
    sized = policy.size(past, default_gb=default, prior=given, shown=shown, features=features)
    if not past and given is not None:
        gb = max(MIN_PER_WORKER_GB, round_gb(sized.gb))
        return PerWorker(
            gb,
            sized.retry_gb,
            f"per-worker memory of {what}: {sized.why} → {gb:g} GiB (rounded up to {GB_STEP:g})",
            sized.short,
        )
    if not past:
        source = f"default of {subject_of(task, task_type, 'a command')}"
        why = f"per-worker memory {default:g} GiB: {source}"
        return PerWorker(default, sized.retry_gb, why, sized.short)
    gb = max(MIN_PER_WORKER_GB, round_gb(sized.gb))
    floor = f", floor {MIN_PER_WORKER_GB:g}" if gb == MIN_PER_WORKER_GB else ""
    return PerWorker(
        gb,
        sized.retry_gb,
        f"per-worker memory from {len(past)} observations of {what}: {sized.why}"
        f" → {gb:g} GiB (rounded up to {GB_STEP:g}{floor})",
        sized.short,
    )


def counterfactual_gb(
    observed: Sequence[ObservedPeak],
    *,
    default: float,
    base_gb: float,
    procs: int,
    prior: sizing_base.Prior | None = None,
) -> dict[str, float]:
    """The memory per pod each policy of ``COUNTERFACTUAL`` would give a task of this shape."""
    past = history(observed)
    found = {}
    for name in COUNTERFACTUAL:
        sized = sizing.POLICIES[name].size(past, default_gb=default, prior=prior)
        found[name] = round_gb(base_gb + procs * max(MIN_PER_WORKER_GB, sized.gb))
    return found


def retry_memory(
    memory_gb: float, base_gb: float, procs: int, retry_gb: float
) -> tuple[float, str]:
    """The memory of the retry after a kill: the larger of a factor more and the policy's."""
    by_factor = memory_gb * RETRY_FACTOR
    by_policy = base_gb + procs * retry_gb
    if by_policy > by_factor:
        return round_gb(by_policy), (
            f"retry memory {base_gb:g} + {procs} × {retry_gb:.3f} GiB = {round_gb(by_policy):g} GiB"
        )
    return round_gb(by_factor), f"retry memory {RETRY_FACTOR:g} × {memory_gb:g} GiB"


def plan_task(
    task: TaskSpec,
    task_type: TaskType | None,
    observed: Sequence[ObservedPeak] = (),
    *,
    extra_workers: bool = True,
    max_cores: int | None = None,
    max_memory_gb: float | None = None,
    prior: sizing_base.Prior | None = None,
    shown: Sequence[sizing_base.Sample] = (),
    policy: sizing_base.Policy = sizing.DEFAULT,
    counterfactual: bool = True,
    features: Features | None = None,
    largest: str = "the largest node",
) -> TaskPlan:
    """Plan one task.

    ``task_type`` is None for a command task; ``observed`` are the observations of its type,
    newest first; ``extra_workers`` is False on a backend that runs one pod per split task
    (then the coordinator merges); ``max_cores``/``max_memory_gb`` are the largest node's (or
    the cluster queue's quota for one pod: ``largest`` names what they are); ``shown`` the
    key's largest needs of all time. The replay benchmark plans every task of a trace through
    this function (``policy`` lets it try other constants; it skips the ``counterfactual``
    sizes).
    """
    split = task_type is not None and task_type.splittable
    why: list[str] = []
    cores = task.cores or (DEFAULT_SPLIT_CORES if split else DEFAULT_UNSPLIT_CORES)
    if max_cores is not None and cores > max_cores:
        why.append(f"cores capped from {cores} to {max_cores}, {largest}")
        cores = max_cores
    known = task_features(task, task_type, cores) if features is None else features
    sized = per_worker_memory(
        task, task_type, observed, prior, shown=shown, policy=policy, features=known
    )
    per_worker_gb = sized.gb
    why.append(sized.why)
    if task_type is None:
        base_gb = 0.0 if task.memory is None or task.memory.base_gb is None else task.memory.base_gb
    elif task.memory is not None and task.memory.base_gb is not None:
        base_gb = task.memory.base_gb
    else:
        base_gb = task_type.base_gb
    pool = cores if split else 1
    chose = task.memory is None or task.memory.per_worker_gb is None
    if chose and max_memory_gb is not None and base_gb + per_worker_gb > max_memory_gb > base_gb:
        fits = math.floor((max_memory_gb - base_gb) / GB_STEP + 1e-9) * GB_STEP
        capped = max(MIN_PER_WORKER_GB, round(fits, 2))
        why.append(
            f"per-process memory capped from {per_worker_gb:g} to {capped:g} GiB, so that one "
            f"process fits {largest}"
        )
        per_worker_gb = capped
    if task.memory is not None and task.memory.gb is not None:
        memory_gb = task.memory.gb
        procs = processes(pool, memory_gb, base_gb, per_worker_gb)
        why.append(f"memory {memory_gb} GiB from the spec")
    elif task_type is None:
        memory_gb, procs = round_gb(per_worker_gb + base_gb), 1
    else:
        procs = pool
        memory_gb = round_gb(base_gb + procs * per_worker_gb)
        why.append(f"memory {base_gb:g} + {procs} × {per_worker_gb:g} GiB = {memory_gb:g} GiB")
    if max_memory_gb is not None and memory_gb > max_memory_gb:
        why.append(f"memory capped from {memory_gb} to {max_memory_gb} GiB, {largest}")
        memory_gb = max_memory_gb
        procs = processes(pool, memory_gb, base_gb, per_worker_gb)
    retry_gb, retry_why = retry_memory(memory_gb, base_gb, procs, sized.retry_gb)
    if max_memory_gb is not None and retry_gb > max_memory_gb:
        retry_gb = max(memory_gb, max_memory_gb)
        retry_why += f", capped at {retry_gb} GiB, {largest}"
    why.append(retry_why)
    why_short = short_reason(sized, task_type, memory_gb=memory_gb, procs=procs, spec=task)
    if max_memory_gb is not None and memory_gb == max_memory_gb:
        why_short = why_short.removesuffix(".") + f", capped at {memory_gb:g} GiB, {largest}."
    others = (
        counterfactual_gb(
            observed,
            default=task_type.per_worker_gb if task_type else DEFAULT_COMMAND_GB,
            base_gb=base_gb,
            procs=procs,
            prior=prior,
        )
        if counterfactual
        else {}
    )
    workers = (task.workers or 1) if split else 1
    if split and not extra_workers and workers > 1:
        # Said where a user looks (the plan's sentence), not only in its arithmetic.
        became = (
            f"workers: {workers} became 1, as this backend runs a split task as one process "
            f"whose {procs} pool processes share its {cores} cores (ask for more cores instead)"
        )
        why.append(became)
        why_short = f"{why_short.removesuffix('.')}; {became}."
        workers = 1
    return TaskPlan(
        cores=cores,
        memory_gb=memory_gb,
        workers=workers,
        base_gb=base_gb,
        per_worker_gb=per_worker_gb,
        processes=procs,
        retry_memory_gb=retry_gb,
        coordinator_merges=split and not extra_workers,
        why="; ".join(why),
        why_short=why_short,
        counterfactual_gb=others,
        features=dict(known),
    )


def plan_run(
    spec: RunSpec,
    *,
    types: Mapping[str, TaskType],
    observed: Mapping[str, Sequence[ObservedPeak]] | None = None,
    evidence: Mapping[str, tuple[float, Sequence[sizing_base.Sample]]] | None = None,
    extra_workers: bool = True,
    max_cores: int | None = None,
    max_memory_gb: float | None = None,
    largest: str = "the largest node",
) -> dict[str, TaskPlan]:
    """The plan of every task of a validated spec, by task id (``observed`` by their keys).

    ``evidence`` is every key's default and largest needs (``runs.planning.evidence``): a task whose
    key has no observation is sized from the prior of the other keys.
    """
    keys = observation_keys(spec)
    return {
        task_id: plan_task(
            task,
            types[name] if (name := type_name(task)) else None,
            (observed or {}).get(keys[task_id], ()),
            extra_workers=extra_workers,
            max_cores=max_cores,
            max_memory_gb=max_memory_gb,
            prior=prior_of(keys[task_id], evidence or {}),
            shown=(evidence or {}).get(keys[task_id], (0.0, ()))[1],
            largest=largest,
        )
        for task_id, task in spec.tasks.items()
    }


def oversized(
    spec: RunSpec,
    *,
    types: Mapping[str, TaskType],
    max_cores: int | None,
    max_memory_gb: float | None,
    largest: str = "the largest node",
) -> dict[str, list[str]]:
    """What a spec asks of one pod beyond the largest node (``largest`` names it), by the
    field's path: cores, a pod's memory, one process's. The planner only caps what it chose
    itself; a task that asks for more than there is would run on less than it asked."""
    errors: dict[str, list[str]] = {}
    for task_id, task in spec.tasks.items():
        at = f"tasks.{task_id}"
        if max_cores is not None and task.cores is not None and task.cores > max_cores:
            errors[f"{at}.cores"] = [
                f"task {task_id} asks {task.cores} cores but {largest} has {max_cores}"
            ]
        memory = task.memory
        if max_memory_gb is None or memory is None:
            continue
        name = type_name(task)
        task_type = types.get(name) if name else None
        base_gb = memory.base_gb if memory.base_gb is not None else 0.0
        if memory.base_gb is None and task_type is not None:
            base_gb = task_type.base_gb
        asked = [
            ("gb", memory.gb, "of memory"),
            (
                "per_worker_gb",
                None if memory.per_worker_gb is None else base_gb + memory.per_worker_gb,
                "for its base and one process",
            ),
            ("base_gb", memory.base_gb, "of base memory"),
        ]
        for field, gb, what in asked:
            if gb is not None and gb > max_memory_gb:
                errors[f"{at}.memory.{field}"] = [
                    f"task {task_id} asks {gb:g} GiB {what} but {largest} has "
                    f"{max_memory_gb:.1f} GiB"
                ]
                break
    return errors


def prior_of(
    key: str, evidence: Mapping[str, tuple[float, Sequence[sizing_base.Sample]]]
) -> sizing_base.Prior:
    """The prior of a key: what the other keys needed of their defaults."""
    return sizing.prior_from({k: found for k, found in evidence.items() if k != key})


def short_reason(
    sized: PerWorker, task_type: TaskType | None, *, memory_gb: float, procs: int, spec: TaskSpec
) -> str:
    """The plan's reason in one plain sentence: "0.4 GiB: 1 earlier run of this command
    peaked at 0.09 GiB; with so few runs simrun keeps a wide margin"."""
    if spec.memory is not None and spec.memory.gb is not None:
        return f"{memory_gb:g} GiB: set by the run's spec."
    subject = subject_of(spec, task_type, "this command")
    per = " per process" if procs > 1 else ""
    head = f"{memory_gb:g} GiB for {procs} processes" if procs > 1 else f"{memory_gb:g} GiB"
    return f"{head}: {sized.short.format(subject=subject, per=per)}."
