"""What Slurm says of a run's jobs, and what it means: pure functions, no Slurm call.

``squeue`` and ``sacct`` lines become ``Seen`` records; ``learn`` folds them into the jobs
of the ledger; ``outcome`` reads an ended job the way simrun's rules do: only Slurm's
``OUT_OF_MEMORY`` (the kernel's OOM killer in the job's cgroup) is a kill for memory, never a
success even with exit code 0; PREEMPTED, NODE_FAIL, BOOT_FAIL and every requeue are
evictions; TIMEOUT, CANCELLED (not by simrun) and FAILED fail with Slurm's words.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from runs.backends import retry_rule
from runs.backends.base import (
    PREEMPTED_PHASE,
    RETRY_LIMIT,
    RETRYING_PHASE,
    BackendStatus,
    FailedAttempt,
)
from runs.backends.slurm.state import Job, NodeSpec, Submission

SQUEUE_FIELDS = (
    "JobArrayID,Name,Comment,State,Reason,NodeList,exit_code,StartTime,EndTime,RestartCnt,"
    "SubmitTime"
)
"""``squeue -O`` columns, each followed by ``|`` (``squeue_format``)."""
SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Start,End"
ENDED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "LOST",
        "REFUSED",
    }
)
"""Final states of a job (``LOST`` and ``REFUSED`` are simrun's: a job Slurm no longer
knows, one ``sbatch`` refused)."""
EVICTIONS = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "LOST"})
RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
NEVER_CLEARS = frozenset(
    {
        "DependencyNeverSatisfied",
        "InvalidAccount",
        "InvalidQOS",
        "PartitionTimeLimit",
        "BadConstraints",
        "ReqNodeNotAvail",
        "PartitionNodeLimit",
        "AccountNotAllowed",
        "QOSJobLimit",
        "JobHeldAdmin",
        "launch_failed_requeued_held",
    }
)
"""Pending reasons that clear only when an administrator acts: a task waiting with one of
them longer than the backend's pending timeout fails, naming it (``never_clears``)."""


KILLED_BY_SLURM = frozenset({"CANCELLED", "TIMEOUT", "DEADLINE"})
"""States of a job Slurm itself ended: the exit code it shows (``0:15``, or ``0:0`` when the
poll came early) is not the command's."""


def ended_by_slurm(job: Job) -> bool:
    """Whether a job has no exit code of its own: Slurm ended it or a signal killed it. An
    exit 0 recorded for it would read as work done (evidence of memory, a clean exit)."""
    return job.state in KILLED_BY_SLURM or bool(job.signal)


def never_clears(reason: str) -> bool:
    """Whether a job's pending reason is one of ``NEVER_CLEARS``. Slurm adds details after a
    comma (``ReqNodeNotAvail, UnavailableNodes:n1``) and squeue spells some reasons with
    spaces (``launch failed requeued held``)."""
    return reason.split(",")[0].strip().replace(" ", "_") in NEVER_CLEARS


Outcome = Literal["succeeded", "oom", "evicted", "cancelled", "failed"]


def squeue_format() -> str:
    return ",".join(f"{field}:|" for field in SQUEUE_FIELDS.split(","))


@dataclass(frozen=True)
class Seen:
    """A job as ``squeue`` or ``sacct`` showed it."""

    job_id: str
    name: str = ""
    comment: str = ""
    state: str = ""
    reason: str = ""
    host: str = ""
    exit_code: int | None = None
    signal: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    restarts: int = 0
    submitted_at: float | None = None


def _time(text: str) -> float | None:
    """A time of Slurm (local time, ``2026-12-06T04:07:17``); None for none."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_squeue(text: str) -> dict[str, Seen]:
    """The jobs of ``squeue -h -r -O <squeue_format()>`` by job id (``123`` or ``123_4``)."""
    found = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 11 or not parts[0]:
            continue
        raw = int(parts[6]) if parts[6].isdigit() else None
        code, sig = (None, None) if raw is None else (raw >> 8, raw & 0x7F)
        found[parts[0]] = Seen(
            job_id=parts[0],
            name=parts[1],
            comment=parts[2],
            state=parts[3].split()[0] if parts[3] else "",
            reason=parts[4] if parts[4] not in {"None", "(null)"} else "",
            host=parts[5] if parts[5] not in {"", "(null)"} else "",
            exit_code=code,
            signal=sig,
            started_at=_time(parts[7]),
            ended_at=_time(parts[8]),
            restarts=int(parts[9]) if parts[9].isdigit() else 0,
            submitted_at=_time(parts[10]),
        )
    return found


def parse_sacct(text: str) -> dict[str, Seen]:
    """The jobs of ``sacct -n -P -X -o <SACCT_FIELDS>`` by job id."""
    found = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        code, _, sig = parts[2].partition(":")
        found[parts[0]] = Seen(
            job_id=parts[0],
            state=parts[1].split()[0] if parts[1] else "",
            host=parts[3] if parts[3] not in {"", "None assigned"} else "",
            exit_code=int(code) if code.isdigit() else None,
            signal=int(sig) if sig.isdigit() else None,
            started_at=_time(parts[4]),
            ended_at=_time(parts[5]),
        )
    return found


def learn(job: Job, seen: Seen) -> bool:
    """Fold what Slurm shows of a job into its record; whether anything changed."""
    before = job.model_dump()
    if seen.restarts > job.restarts:
        # Requeued (by an administrator, a preemption, a failed node): each run before is an
        # eviction; the next one is another attempt of the same job.
        job.restart_started += [job.started_at] + [None] * (seen.restarts - job.restarts - 1)
        job.restarts = seen.restarts
        job.started_at = None
    job.state = seen.state or job.state
    job.reason = seen.reason if seen.state == "PENDING" else ""
    if job.reason and never_clears(job.reason):
        job.stuck_since = job.stuck_since or time.time()
    else:
        job.stuck_since = None  # a reason that clears restarts the count
    job.host = seen.host or job.host
    if seen.state in RUNNING or seen.state in ENDED:
        job.started_at = seen.started_at or job.started_at
    if seen.state in ENDED:
        job.final = True
        job.ended_at = seen.ended_at or time.time()
        job.exit_code, job.signal = seen.exit_code, seen.signal
    return job.model_dump() != before


def outcome(job: Job, stopped_at: float | None) -> Outcome:
    """What the end of a job's latest run means for its node."""
    if job.state == "OUT_OF_MEMORY":
        return "oom"
    if job.state == "COMPLETED" and job.exit_code == 0:
        return "succeeded"
    if job.state in EVICTIONS:
        return "evicted"
    if job.state == "CANCELLED" and stopped_at is not None:
        return "cancelled"
    return "failed"


def message(job: Job, stopped_at: float | None) -> str:
    """Slurm's words for an ended job; a CANCELLED job of a run simrun did not stop (no
    ``stopped_at``) was cancelled by someone else, which the words say."""
    code = f"exit code {job.exit_code}:{job.signal}" if job.exit_code is not None else ""
    words = {
        "OUT_OF_MEMORY": "Slurm: OUT_OF_MEMORY, killed by the OOM killer in the job's cgroup",
        "TIMEOUT": "Slurm: TIMEOUT, the job reached its time limit",
        "CANCELLED": "Slurm: CANCELLED",
        "FAILED": "Slurm: FAILED",
        "PREEMPTED": "Slurm: PREEMPTED",
        "NODE_FAIL": "Slurm: NODE_FAIL, its node failed",
        "BOOT_FAIL": "Slurm: BOOT_FAIL, its node did not boot",
        "LOST": "Slurm no longer knows the job (past MinJobAge, no accounting)",
    }.get(job.state, f"Slurm: {job.state}")
    if job.state == "REFUSED":
        return f"sbatch refused the job: {job.reason}"
    if job.state == "CANCELLED" and job.reason:
        words += f" ({job.reason})"
    if job.state == "CANCELLED" and stopped_at is None:
        words += " by an scancel outside simrun"
    return f"{words} ({code}) [job {job.job_id}]" if code else f"{words} [job {job.job_id}]"


def attempts(job: Job, stopped_at: float | None) -> list[tuple[int, Outcome | None]]:
    """Each run of a job by attempt number: its requeues (evictions), then its latest run
    (None while it has not ended)."""
    runs: list[tuple[int, Outcome | None]] = [
        (job.attempt + i, "evicted") for i in range(job.restarts)
    ]
    runs.append((job.latest_attempt, outcome(job, stopped_at) if job.final else None))
    return runs


def failed_attempts(job: Job, spec: NodeSpec, stopped_at: float | None) -> list[FailedAttempt]:
    """The runs of a job that did not succeed, as the protocol records them."""
    found = []
    killed = ended_by_slurm(job)
    for number, result in attempts(job, stopped_at):
        if result is None or result == "succeeded":
            continue
        latest = number == job.latest_attempt
        found.append(
            FailedAttempt(
                attempt=number,
                exit_code=None if result == "oom" or not latest or killed else job.exit_code,
                oom_killed=result == "oom",
                evicted=result == "evicted",
                node=job.host or None,
                message=message(job, stopped_at) if latest else "Slurm requeued the job",
                ended_at=job.ended_at if latest else None,
                started_at=job.started_at if latest else job.restart_started[number - job.attempt],
                memory_gb=job.memory_gb,
                reason=job.state if latest and result == "evicted" else "",
            )
        )
    return found


def retry(spec: NodeSpec, jobs: list[Job], stopped_at: float | None) -> str | None:
    """The phase of a node whose next attempt is due after its latest job ended, None when
    it gets none: a kill for memory once more with the retry memory unless it is the second
    one with the retry memory (Ruling 35), an eviction up to ``RETRY_LIMIT`` retries."""
    results = [r for job in jobs for _, r in attempts(job, stopped_at)]
    last = results[-1]
    if len(results) > RETRY_LIMIT:
        return None
    if last == "oom" and not retry_rule.fails_the_run(
        proven_kills=results.count("oom"), is_retry=len(results) > 1 and results[-2] == "oom"
    ):
        return RETRYING_PHASE
    if last == "evicted":
        return PREEMPTED_PHASE
    return None


def next_memory_gb(spec: NodeSpec, jobs: list[Job], stopped_at: float | None) -> float:
    """The memory of a node's next attempt: the retry memory right after a kill for memory."""
    last = attempts(jobs[-1], stopped_at)[-1][1] if jobs else None
    previous = retry_rule.KILLED_EXIT if last == "oom" else (jobs[-1].exit_code if jobs else None)
    return retry_rule.next_memory_gb(
        memory_gb=spec.memory_gb, retry_memory_gb=spec.retry_memory_gb, previous_exit=previous
    )


def node_phase(spec: NodeSpec, jobs: list[Job], stopped_at: float | None) -> str | None:
    """The Argo phase of a node; None for one with no job yet."""
    if not jobs:
        return None
    latest = jobs[-1]
    if not latest.final:
        return "Running" if latest.state in RUNNING else "Pending"
    if outcome(latest, stopped_at) == "succeeded":
        return "Succeeded"
    waiting = retry(spec, jobs, stopped_at)
    return waiting if waiting is not None and stopped_at is None else "Failed"


def due(submission: Submission, phases: dict[str, str]) -> list[NodeSpec]:
    """The nodes with no job yet whose inputs all succeeded: submitted next (none once the
    run is stopped)."""
    if submission.stopped:
        return []
    return [
        spec
        for spec in submission.nodes
        if spec.name not in phases and all(phases.get(a) == "Succeeded" for a in spec.after)
    ]


def phases(submission: Submission) -> dict[str, str]:
    """The phase of every node with a job."""
    found = {}
    for spec in submission.nodes:
        phase = node_phase(spec, submission.jobs_of(spec.name), submission.stopped_at)
        if phase is not None:
            found[spec.name] = phase
    return found


def building(submission: Submission) -> str:
    """Why the run's first nodes wait while a job builds its packages' venv; empty else."""
    if submission.build is None or submission.build_failed:
        return ""
    jobs = submission.jobs_of(submission.build.name)
    if jobs and jobs[-1].final:
        return ""
    job = f" (Slurm job {jobs[-1].job_id})" if jobs else ""
    return f"installing the environment's packages{job}"


def backend_status(submission: Submission) -> BackendStatus:
    """The status of a run from its ledger."""
    stopped_at = submission.stopped_at
    tasks: dict[str, str] = {}
    failed: dict[str, list[FailedAttempt]] = {}
    hosts: dict[str, str] = {}
    started: dict[str, float] = {}
    waiting: dict[str, str] = {}
    for spec in submission.nodes:
        jobs = submission.jobs_of(spec.name)
        phase = node_phase(spec, jobs, stopped_at)
        if phase is None:
            continue
        tasks[spec.name] = phase
        latest = jobs[-1]
        if latest.host:
            hosts[spec.name] = latest.host
        if latest.started_at is not None:
            started[spec.name] = latest.started_at
        if phase == "Pending" and latest.reason:
            waiting[spec.name] = f"Slurm: {latest.reason}"
        for job in jobs:
            failed.setdefault(spec.worker, []).extend(failed_attempts(job, spec, stopped_at))
    waiting |= {spec.name: why for spec in due(submission, tasks) if (why := building(submission))}
    live = any(p in {"Running", "Pending", RETRYING_PHASE, PREEMPTED_PHASE} for p in tasks.values())
    live = live or bool(due(submission, tasks))
    main = [s.name for s in submission.nodes if not s.array]
    if all(tasks.get(name) == "Succeeded" for name in main):
        phase = "Succeeded"
    elif live:
        phase = "Running" if started else "Pending"
    else:
        phase = "Failed"
    message = submission.build_failed
    if submission.build_failed:
        phase = "Failed"
    if submission.stopped:
        strategy = "Terminate" if submission.stopped == "cancel" else "Stop"
        message = f"Stopped with strategy '{strategy}'"
    return BackendStatus(
        phase=phase,
        tasks=tasks,
        failed={k: v for k, v in failed.items() if v},
        hosts=hosts,
        started=started,
        message=message,
        waiting=waiting,
    )
