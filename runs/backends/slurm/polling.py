"""What one poll of the Slurm backend asks Slurm of the jobs, and what it does of the answers.

One ``squeue`` for the jobs of every live run together; the jobs Slurm has that the ledger
lacks are adopted, a job stuck pending past the timeout is cancelled, and one ``sacct`` asks
what became of the jobs that left the queue. The backend's poll (``SlurmBackend.poll``, under
the ledger's lock) calls these, then submits what became due and saves what changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from runs.backends.slurm import joblogs, owners
from runs.backends.slurm import status as slurm_status
from runs.backends.slurm.commands import Slurm, SlurmError
from runs.backends.slurm.script import extra_node, parse_comment
from runs.backends.slurm.state import Job, Submission

log = logging.getLogger(__name__)

SACCT_LATE_S = 120.0
"""How long a job that left the queue may be missing from sacct (it records late)."""
ADOPT_SKEW_S = 5.0
"""Slurm's times are whole seconds: a job submitted this long before its run was kept is
still the run's."""


def queued(slurm: Slurm, submissions: Sequence[Submission]) -> dict[str, slurm_status.Seen]:
    """What ``squeue`` says of the jobs of runs, by job id, in one call for them all."""
    if not submissions:
        return {}
    names = ",".join(sorted({s.name for s in submissions}))
    logins = owners.whose({s.login for s in submissions})
    argv = ["squeue", "-h", "-r", "-t", "all", *logins, f"--name={names}"]
    return slurm_status.parse_squeue(slurm.run([*argv, "-O", slurm_status.squeue_format()]))


def adopt(submission: Submission, seen: dict[str, slurm_status.Seen]) -> bool:
    """Record the jobs of a run that Slurm has and the ledger lacks (an ``sbatch`` that
    timed out after it submitted, a service that stopped between the two)."""
    known = {j.job_id for j in submission.jobs}
    adopted = False
    for job_id, job in seen.items():
        fields = parse_comment(job.comment)
        if job.name != submission.name or job_id in known or not fields:
            continue
        if (job.submitted_at or 0) < submission.created - ADOPT_SKEW_S:
            continue  # an earlier job of the same name: ids and names are reused
        node = fields.get("node", "")
        if "array" in fields:
            task = fields["array"].removesuffix("-extra")
            node = extra_node(task, int(fields["first"]) + int(job_id.partition("_")[2] or 0))
        if not any(s.name == node for s in submission.nodes):
            continue
        spec = submission.node(node)
        submission.jobs.append(
            Job(
                node=node,
                job_id=job_id,
                attempt=int(fields.get("attempt", 0)),
                memory_gb=spec.memory_gb,
                submitted_at=job.submitted_at or time.time(),
            )
        )
        slurm_status.learn(submission.jobs[-1], job)
        adopted = True
    return adopted


def cancel_if_stuck(slurm: Slurm, job: Job, now: float, pending_timeout_s: float) -> bool:
    """Cancel a job that waited past the pending timeout, counted from when its reason
    became one that never clears by itself (a node drained for a minute is no cause to
    fail); whether it was."""
    if job.state != "PENDING" or job.stuck_since is None:
        return False
    if now - job.stuck_since < pending_timeout_s:
        return False
    slurm.run(["scancel", job.job_id])
    job.state, job.final, job.ended_at = "CANCELLED", True, now
    job.reason = (
        f"waited {now - job.stuck_since:.0f} s with reason {job.reason}, "
        "which clears only when an administrator acts"
    )
    return True


def resolve_gone(slurm: Slurm, gone: list[tuple[Submission, Job]], now: float) -> set[str]:
    """Ask ``sacct`` once for the jobs that left the queue. Without accounting, or past
    the time sacct may be late, a job's end is read from its log in the store; a job
    with none there is ``LOST``: an eviction, retried."""
    ids = ",".join(job.job_id for _, job in gone)
    start = time.strftime(
        "%Y-%m-%dT%H:%M:%S", time.localtime(min(j.submitted_at for _, j in gone) - 60)
    )
    argv = ["sacct", "-n", "-P", "-X", "-S", start, "-j", ids, "-o", slurm_status.SACCT_FIELDS]
    if any(submission.login for submission, _ in gone):
        argv.append("--allusers")  # root sees only its own jobs without it
    accounting = True
    try:
        found = slurm_status.parse_sacct(slurm.run(argv))
    except SlurmError as error:
        log.info("sacct cannot say what became of %d job(s): %s", len(gone), error)
        accounting = "accounting storage is disabled" not in str(error).lower()
        found = {}
    changed = set()
    for submission, job in gone:
        if job.job_id in found and found[job.job_id].state in slurm_status.ENDED:
            slurm_status.learn(job, found[job.job_id])
        elif not accounting or now - (job.gone_at or now) > SACCT_LATE_S:
            code = joblogs.exit_in_log(submission, job)
            job.state = "LOST" if code is None else "COMPLETED" if code == 0 else "FAILED"
            job.final, job.ended_at, job.exit_code = True, now, code
        else:
            continue
        changed.add(submission.name)
    return changed
