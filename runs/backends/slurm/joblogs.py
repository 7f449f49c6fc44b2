"""The logs the jobs write into their task's ``logs/`` on the store, read without Slurm.

An attempt's log is ``<node>-<attempt>.log``, ended by the script's ``[simrun] exit N``;
Slurm's own lines for a job are ``slurm-<job>.out`` (``script``). The folder is the
service's (made before the job is submitted) and is read by descriptor, no link followed.
"""

from __future__ import annotations

import os
import re
import time

from harness import untrusted
from runs.backends import logs as kept_logs
from runs.backends.base import PodLog
from runs.backends.slurm import status as slurm_status
from runs.backends.slurm.state import Job, Submission
from runs.common.store import TaskFolder

EXIT_LINE = re.compile(r"\[simrun\] exit (\d+)")
"""The last line of a job's log, written by its script (``script.batch_script``)."""
LOG_CAP = 64 << 20
"""The most of a log read."""
LOG_LATE_S = 60.0
"""How long after a job's end its log may still be missing (a shared filesystem shows it
late); past that an attempt with no log (one ended before its script began) has none."""


def logs_fd(submission: Submission, task: str) -> int:
    """A descriptor of a task's ``logs/``, a folder of the service's own (of the run's login
    in team mode, walked without links all the same); OSError without."""
    parts = ("runs", submission.run, "tasks", task, "logs")
    if submission.login:
        return untrusted.open_dir(submission.store, parts)
    return untrusted.own_dir(submission.store, parts)


def read_text(dir_fd: int, name: str) -> str:
    """A log of the task's ``logs/`` folder (a descriptor); empty when missing."""
    try:
        with untrusted.open_regular(dir_fd, name) as handle:
            return handle.read(LOG_CAP).decode(errors="replace")
    except OSError:
        return ""


def pod_logs(submission: Submission, task_id: str, tail_lines: int | None) -> list[PodLog]:
    """The log of each attempt of a task, oldest first, Slurm's own lines after the latest
    attempt of each job; the last ``tail_lines`` of each when given."""
    jobs = [j for j in submission.jobs if submission.node(j.node).task == task_id]
    if not jobs:
        return []
    try:
        fd = logs_fd(submission, task_id)
    except OSError:
        return []
    found = []
    try:
        for job in sorted(jobs, key=lambda j: j.submitted_at):
            for number, result in slurm_status.attempts(job, submission.stopped_at):
                text = read_text(fd, f"{job.node}-{number}.log")
                if number == job.latest_attempt:
                    text += read_text(fd, f"slurm-{job.job_id}.out")
                if tail_lines is not None:
                    lines = text.splitlines(keepends=True)
                    text = "".join(lines[-tail_lines:] if tail_lines > 0 else [])
                found.append(
                    PodLog(
                        node=f"{job.node}({number})",
                        pod=f"{job.node}-{number}",
                        text=text,
                        done=result is not None,
                        attempt=number,
                    )
                )
    finally:
        os.close(fd)
    return found


def complete(submission: Submission, task_id: str) -> bool:
    """Whether every job of a task ended and each attempt that started has its log (or
    ended long enough ago for a missing log to be none)."""
    folder = TaskFolder(submission.store, ("runs", submission.run, "tasks", task_id))
    names = set(kept_logs.kept(folder))
    for job in submission.jobs:
        if submission.node(job.node).task != task_id:
            continue
        if not job.final:
            return False
        started = [*job.restart_started, job.started_at]
        late = time.time() - (job.ended_at or 0) < LOG_LATE_S
        for (number, _), began in zip(slurm_status.attempts(job, None), started, strict=True):
            if late and began is not None and f"{job.node}-{number}.log" not in names:
                return False
    return True


def exit_in_log(submission: Submission, job: Job) -> int | None:
    """The exit code the job's script wrote last in its log, None without one (a job killed
    or never started): what the store says of a job Slurm forgot."""
    try:
        fd = logs_fd(submission, submission.node(job.node).task)
    except OSError:
        return None
    try:
        text = read_text(fd, f"{job.node}-{job.latest_attempt}.log")
    finally:
        os.close(fd)
    lines = text.rstrip("\n").splitlines()
    match = EXIT_LINE.fullmatch(lines[-1]) if lines else None
    return int(match[1]) if match else None
