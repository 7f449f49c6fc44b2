"""Submitting a run's due jobs: the next nodes of its DAG and its retries.

A node's job is submitted once the nodes of its inputs succeeded (the service keeps the DAG's
edges, docs/slurm.md); a node whose latest job was killed for memory or evicted gets its next
attempt, with the retry memory after a kill. A task's extra workers go as arrays.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import untrusted
from harness.config import GRACE_S, STOP_MARGIN_S
from runs.backends.base import PREEMPTED_PHASE, RETRYING_PHASE
from runs.backends.slurm import owners, packages
from runs.backends.slurm import status as slurm_status
from runs.backends.slurm.commands import Slurm, SlurmError
from runs.backends.slurm.script import Placement as Where
from runs.backends.slurm.script import batch_script, chunks, extra_node, sbatch_argv
from runs.backends.slurm.state import Job, NodeSpec, Submission


@dataclass
class Submitter:
    """How jobs are submitted: where they go, how long ``sbatch`` may take, the grace of a
    job's units after a SIGTERM, the interpreter whose ``simrun-*`` the jobs run."""

    slurm: Slurm
    where: Where = field(default_factory=Where)
    submit_timeout_s: float = 60.0
    grace_s: float = GRACE_S
    bin_dir: Path = field(default_factory=lambda: Path(sys.executable).parent)
    _max_array: int | None = None

    def advance(self, submission: Submission) -> bool:
        """Submit the jobs that are due: the build of the run's packages first (nothing else
        until it built them), then nodes whose inputs succeeded, retries."""
        if submission.stopped:
            return False
        where = submission.environment
        if submission.build is not None and where is not None and not packages.built(where):
            return self._build(submission)
        phases = slurm_status.phases(submission)
        due = slurm_status.due(submission, phases)
        arrays: dict[str, list[NodeSpec]] = {}
        for spec in due:
            if spec.array:
                arrays.setdefault(spec.array, []).append(spec)
            else:
                self._submit_job(submission, spec, attempt=0, memory_gb=spec.memory_gb)
        for group in arrays.values():
            try:
                self._submit_array(submission, group)
            except SlurmError as error:
                for spec in group:
                    refuse(submission, spec, 0, spec.memory_gb, error)
        for spec in submission.nodes:
            if phases.get(spec.name) in {RETRYING_PHASE, PREEMPTED_PHASE}:
                jobs = submission.jobs_of(spec.name)
                memory = slurm_status.next_memory_gb(spec, jobs, submission.stopped_at)
                attempt = jobs[-1].latest_attempt + 1
                self._submit_job(submission, spec, attempt=attempt, memory_gb=memory)
        return bool(due) or any(p in {RETRYING_PHASE, PREEMPTED_PHASE} for p in phases.values())

    def _build(self, submission: Submission) -> bool:
        """Submit the build of the run's packages if no job builds them; once its job ended
        without building them, record why (the run fails). Whether anything changed."""
        assert submission.environment is not None and submission.build is not None
        jobs = submission.jobs_of(submission.build.name)
        if not jobs:
            spec = submission.build
            self._submit_job(submission, spec, attempt=0, memory_gb=spec.memory_gb)
            return True
        latest = jobs[-1]
        if not latest.final or submission.build_failed:
            return False
        said = slurm_status.message(latest, submission.stopped_at)
        submission.build_failed = packages.failure(
            submission.environment, submission.packages, said
        )
        return True

    def _bin_dir(self, submission: Submission) -> Path:
        """The folder first on a job's ``PATH``: the venv of the run's packages, if any."""
        if submission.environment is None:
            return self.bin_dir
        return packages.bin_dir(submission.environment)

    def _logs_dir(self, submission: Submission, task: str) -> Path:
        """The task's ``logs/``, made now: the job writes there. A folder of the service's
        own, or of the run's login in team mode (its jobs write as it)."""
        if submission.build is not None and task == submission.build.task:
            assert submission.environment is not None
            return submission.environment
        parts = ("runs", submission.run, "tasks", task, "logs")
        if submission.login:
            owners.logs_dir(submission.store, parts, submission.login)
        else:
            os.close(untrusted.service_dir(submission.store, parts))
        return submission.store.joinpath(*parts)

    def _sbatch(self, submission: Submission, argv: list[str], script: str) -> str:
        """Submit a job as the run's login (the service's own user without one); its id."""
        argv = [*argv, *owners.sbatch_flags(submission.login)]
        if submission.reservation:
            argv.append(f"--reservation={submission.reservation}")
        out = self.slurm.run(argv, stdin=script, timeout_s=self.submit_timeout_s).strip()
        return out.split(";")[0]

    def _submit_job(
        self, submission: Submission, spec: NodeSpec, *, attempt: int, memory_gb: float
    ) -> None:
        logs = self._logs_dir(submission, spec.task)
        script = batch_script(
            spec,
            attempt=attempt,
            memory_gb=memory_gb,
            logs=logs,
            bin_dir=self._bin_dir(submission),
            grace_s=self._unit_grace_s(),
        )
        argv = sbatch_argv(
            spec.model_copy(update={"array": ""}),
            workflow=submission.name,
            attempt=attempt,
            memory_gb=memory_gb,
            logs=logs,
            where=self.where,
        )
        try:
            job_id = self._sbatch(submission, argv, script)
        except SlurmError as error:
            refuse(submission, spec, attempt, memory_gb, error)
            return
        submission.jobs.append(
            Job(
                node=spec.name,
                job_id=job_id,
                attempt=attempt,
                memory_gb=memory_gb,
                submitted_at=time.time(),
            )
        )

    def _submit_array(self, submission: Submission, group: list[NodeSpec]) -> None:
        """The first attempts of a task's extra workers, as arrays under ``MaxArraySize``."""
        spec = group[0]
        workers = sorted(int(s.worker.rsplit("-w", 1)[1]) for s in group)
        logs = self._logs_dir(submission, spec.task)
        for first, count in chunks(workers[0], len(workers), self._max_array_size()):
            script = batch_script(
                spec,
                attempt=0,
                memory_gb=spec.memory_gb,
                logs=logs,
                bin_dir=self._bin_dir(submission),
                grace_s=self._unit_grace_s(),
                first=first,
            )
            argv = sbatch_argv(
                spec,
                workflow=submission.name,
                attempt=0,
                memory_gb=spec.memory_gb,
                logs=logs,
                where=self.where,
                array=(first, count),
            )
            job_id = self._sbatch(submission, argv, script)
            now = time.time()
            submission.jobs += [
                Job(
                    node=extra_node(spec.task, first + i),
                    job_id=f"{job_id}_{i}",
                    attempt=0,
                    memory_gb=spec.memory_gb,
                    submitted_at=now,
                )
                for i in range(count)
            ]

    def _unit_grace_s(self) -> float:
        """What running units get after a SIGTERM, so the job ends before Slurm's SIGKILL."""
        return self.grace_s - min(STOP_MARGIN_S, self.grace_s / 2)

    def _max_array_size(self) -> int:
        """Slurm's ``MaxArraySize`` (read once; 1001, Slurm's default, when unreadable)."""
        if self._max_array is None:
            self._max_array = 1001
            out = self.slurm.run(["scontrol", "show", "config"])
            for line in out.splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "MaxArraySize" and value.strip().isdigit():
                    self._max_array = int(value.strip())
        return self._max_array


def refuse(
    submission: Submission, spec: NodeSpec, attempt: int, memory_gb: float, error: SlurmError
) -> None:
    """Record a job ``sbatch`` refused (a partition that does not exist, more memory than a
    node has): its node fails with Slurm's words, as another attempt would be refused too."""
    now = time.time()
    submission.jobs.append(
        Job(
            node=spec.name,
            job_id="",
            attempt=attempt,
            memory_gb=memory_gb,
            submitted_at=now,
            state="REFUSED",
            reason=str(error),
            final=True,
            ended_at=now,
        )
    )
