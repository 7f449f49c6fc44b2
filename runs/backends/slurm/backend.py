"""The Slurm backend: one job per attempt of a DAG node, on the cluster a site already has.

The service keeps the DAG's edges: a node's job is submitted once the nodes of its inputs
succeeded, so nothing waits in Slurm's queue on an upstream that failed (docs/slurm.md). One
poll a period (``poll_s``, shared by every process of the service through the ledger's lock)
asks ``squeue`` once for the jobs of all live runs together, ``sacct`` once for those that
left the queue, then submits what became due: the next nodes, a retry after a kill for memory
(with the retry memory) or after an eviction. Status, versions, logs and placements are read
from the ledger and the store, never by a Slurm call of their own.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.config import GRACE_S
from harness.tasktypes import TaskType
from runs.backends.base import (
    BackendStatus,
    BackendUnavailable,
    ClusterConfig,
    KeptLogs,
    NodeInfo,
    Placement,
    PodLog,
    RunRecord,
    TaskPlan,
    workflow_name,
)
from runs.backends.nodes import choose_node
from runs.backends.slurm import joblogs, owners, polling, reservations
from runs.backends.slurm import packages as slurm_packages
from runs.backends.slurm import status as slurm_status
from runs.backends.slurm.commands import Slurm, SlurmError
from runs.backends.slurm.nodes import run_nodes
from runs.backends.slurm.script import (
    Placement as Where,
)
from runs.backends.slurm.state import Job, Ledger, Submission
from runs.backends.slurm.submitting import Submitter
from runs.common.store import TaskFolder

log = logging.getLogger(__name__)


class SlurmBackend:
    """A backend whose runs are Slurm jobs, submitted from this host."""

    name = "slurm"
    runs_images = False
    extra_workers = True
    enforces_memory = True
    logs_in_store = True
    largest_node = "the largest node"

    def __init__(
        self,
        store: Path,
        *,
        slurm: Slurm | None = None,
        where: Where | None = None,
        poll_s: float = 30.0,
        submit_timeout_s: float = 60.0,
        pending_timeout_s: float = 600.0,
        grace_s: float = GRACE_S,
        probe: bool = True,
        team: bool = False,
        build_memory_gb: float = 2.0,
        packages_timeout_s: float = 1800.0,
    ) -> None:
        """``poll_s`` is the period of the one ``squeue`` of all runs; ``pending_timeout_s``
        how long a job may wait with a reason that never clears by itself; ``probe`` reads the
        largest node with ``sinfo`` now (None when Slurm does not answer); ``team``: the
        service runs as root for a team and submits each run's jobs as its owner's login;
        ``build_memory_gb`` and ``packages_timeout_s`` bound the job that builds a run's
        packages."""
        self.store = Path(store)
        self.team = team
        self.build_memory_gb, self.packages_timeout_s = build_memory_gb, packages_timeout_s
        self.ledger = Ledger(self.store)
        self.slurm = slurm or Slurm()
        self.where = where or Where()
        self.submitter = Submitter(
            self.slurm, self.where, submit_timeout_s=submit_timeout_s, grace_s=grace_s
        )
        self.poll_s = poll_s
        self.pending_timeout_s = pending_timeout_s
        self._callbacks: list[Callable[[], None]] = []
        self.max_cores: int | None = None
        self.max_memory_gb: float | None = None
        self.reserves_nodes = False
        self.no_reservations = (
            "the slurm backend reserves no nodes: Slurm did not say whether the service has "
            "its Operator level: submit without reserve_node"
        )
        if probe:
            self._probe()

    def _probe(self) -> None:
        """Read the largest node (``sinfo``) and whether the service may reserve nodes."""
        try:
            problem = reservations.problem(self.slurm)
            self.reserves_nodes, self.no_reservations = problem is None, problem or ""
        except (BackendUnavailable, SlurmError) as error:
            log.warning("cannot ask Slurm whether the service may reserve nodes: %s", error)
        try:
            largest = max(self.nodes(), key=lambda n: (n.cores, n.memory_gb))
            self.max_cores, self.max_memory_gb = int(largest.cores), largest.memory_gb
        except (BackendUnavailable, SlurmError, ValueError) as error:
            log.warning("cannot read Slurm's nodes: %s", error)

    @classmethod
    def from_settings(cls) -> SlurmBackend:
        """The backend of the Django settings (``SIMRUN_STORE``, ``SIMRUN_SLURM_*``)."""
        from django.conf import settings

        return cls(
            settings.SIMRUN_STORE,
            slurm=Slurm(conf=settings.SIMRUN_SLURM_CONF),
            where=Where(
                partition=settings.SIMRUN_SLURM_PARTITION,
                account=settings.SIMRUN_SLURM_ACCOUNT,
                qos=settings.SIMRUN_SLURM_QOS,
                time_limit=settings.SIMRUN_SLURM_TIME_LIMIT,
                extra=tuple(shlex.split(settings.SIMRUN_SLURM_SBATCH_ARGS)),
            ),
            poll_s=settings.SIMRUN_SLURM_POLL_S,
            submit_timeout_s=settings.SIMRUN_SLURM_SUBMIT_TIMEOUT_S,
            pending_timeout_s=settings.SIMRUN_SLURM_PENDING_TIMEOUT_S,
            team=os.geteuid() == 0,
            build_memory_gb=settings.SIMRUN_BUILD_MEMORY_GB,
            packages_timeout_s=settings.SIMRUN_PACKAGES_TIMEOUT_S,
        )

    # Submission.

    def submit(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str:
        """Keep the run and submit the jobs of the nodes that wait for nothing; a run submitted
        before is kept. ValueError when a task cannot run or Slurm refuses its job."""
        name = workflow_name(record.id)
        if problem := self._refusal(record):
            raise ValueError(problem)
        login = record.login if self.team else ""
        nodes = run_nodes(record, plans, types)
        with self.ledger.lock():
            try:
                self.ledger.read(name)
                return name
            except KeyError:
                pass
            submission = Submission(
                name=name,
                run=record.id,
                store=record.store,
                created=time.time() if record.created_at is None else record.created_at,
                nodes=nodes,
                login=login,
            )
            if login:
                owners.hand_over_run(self.store, record.id, login)
            if record.packages:
                self._with_packages(submission, record.packages)
            if record.reserved_node:
                submission.reservation = reservations.name(record.id)
                if login:  # the login's jobs go into the service's reservation
                    reservations.admit(self.slurm, record.id, login)
            self._save(submission)
            try:
                self.submitter.advance(submission)
            finally:
                self._save(submission)
            refused = [j for j in submission.jobs if j.state == "REFUSED"]
            if refused:
                submission.stopped, submission.ended = "stop", True
                self._save(submission)
                self.slurm.run(["scancel", *owners.whose({login}), f"--name={name}"])
                raise ValueError(slurm_status.message(refused[0], submission.stopped_at))
        return name

    def _with_packages(self, submission: Submission, names: list[str]) -> None:
        """The venv of a run's packages on the store, and the job that builds it unless it
        was built (``packages``): the run's jobs wait for it."""
        where = slurm_packages.folder(self.store, names, submission.login)
        submission.packages, submission.environment = sorted(set(names)), where
        if not slurm_packages.built(where):
            submission.build = slurm_packages.build_node(
                where, names, memory_gb=self.build_memory_gb, timeout_s=self.packages_timeout_s
            )

    # The poll.

    def refusal(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str | None:
        """Why a run cannot be submitted: in team mode, an owner without a Unix login (or
        with one jobs cannot run as), or packages the login cannot build. Nothing of a run's
        size is bounded beyond planning's."""
        return self._refusal(record)

    def _refusal(self, record: RunRecord) -> str | None:
        """``refusal``: an owner without a login; in team mode, packages whose build (a job
        of the login running this service's Python) cannot reach that Python."""
        if problem := owners.refusal(self.team, record.login):
            return problem
        if record.packages and (problem := owners.unreachable(self.team, self.store, "split")):
            return (
                "environment.packages: the venv of the packages is built by a job of the "
                f"owner's login, which runs this service's Python: {problem}"
            )
        return None

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after a poll that learnt something of a run."""
        self._callbacks.append(callback)

    def poll(self, *, force: bool = False) -> bool:
        """One poll of every live run, unless one ran within ``poll_s`` (in any process);
        whether it learnt anything. BackendUnavailable when Slurm did not answer: the next
        poll waits longer (up to 8 periods), nothing is lost."""
        with self.ledger.lock():
            meta = json.loads(self.ledger.read_meta("poll.json") or "{}")
            now = time.time()
            if not force and now < meta.get("next", 0):
                return False
            try:
                changed = self._poll(now)
            except BackendUnavailable:
                failures = meta.get("failures", 0) + 1
                backoff = self.poll_s * 2 ** min(failures, 3)
                self._write_poll({"at": now, "next": now + backoff, "failures": failures})
                raise
            self._write_poll({"at": now, "next": now + self.poll_s, "failures": 0})
        if changed:
            for callback in self._callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("a callback of the slurm backend failed")
        return changed

    def _write_poll(self, meta: dict[str, Any]) -> None:
        self.ledger.write_meta("poll.json", json.dumps(meta))

    def _poll(self, now: float) -> bool:
        live = self.ledger.live()
        # Every live run is asked, one with no job left to watch too: a job its ledger lacks
        # (an sbatch that timed out, a service stopped before its record) is adopted, not
        # submitted again.
        asked = live
        seen = polling.queued(self.slurm, asked)
        changed: set[str] = set()
        gone: list[tuple[Submission, Job]] = []
        for submission in asked:
            if polling.adopt(submission, seen):
                changed.add(submission.name)
            for job in submission.jobs:
                if job.final:
                    continue
                if job.job_id in seen:
                    if slurm_status.learn(job, seen[job.job_id]):
                        changed.add(submission.name)
                    if polling.cancel_if_stuck(self.slurm, job, now, self.pending_timeout_s):
                        changed.add(submission.name)
                elif job.submitted_at < now - 1:
                    job.gone_at = job.gone_at or now
                    gone.append((submission, job))
        if gone:
            changed |= polling.resolve_gone(self.slurm, gone, now)
        for submission in live:
            if self.submitter.advance(submission):
                changed.add(submission.name)
            if all(j.final for j in submission.jobs) and (
                submission.stopped or slurm_status.backend_status(submission).phase == "Succeeded"
            ):
                submission.ended = True
                changed.add(submission.name)
            if submission.name in changed:
                self._save(submission)
        return bool(changed)

    def _save(self, submission: Submission) -> None:
        """Write a run and its version (under the lock)."""
        self.ledger.write(submission)
        versions = json.loads(self.ledger.read_meta("versions.json") or "{}")
        if submission.ended:
            versions.pop(submission.name, None)
        else:
            digest = hashlib.blake2b(submission.model_dump_json().encode(), digest_size=8)
            versions[submission.name] = digest.hexdigest()
        self.ledger.write_meta("versions.json", json.dumps(versions))

    # Status and control.

    def _poll_quietly(self) -> None:
        """A poll if one is due; a Slurm that does not answer leaves the ledger as it is."""
        try:
            self.poll()
        except BackendUnavailable as error:
            log.warning("slurm did not answer the poll: %s", error)

    def versions(self, names: list[str]) -> dict[str, str]:
        """The version of each live run after the poll this period (``ChangeSignal``)."""
        self._poll_quietly()
        known = json.loads(self.ledger.read_meta("versions.json") or "{}")
        return {name: known[name] for name in names if name in known}

    def status(self, name: str) -> BackendStatus:
        """The phases of a run's nodes from the ledger; KeyError for an unknown run."""
        self._poll_quietly()
        return slurm_status.backend_status(self.ledger.read(name))

    def cancel(self, name: str) -> None:
        """Cancel every job of a run by its name; KeyError for a run the backend never had
        (its jobs, if any, are cancelled all the same)."""
        self._halt(name, "cancel")

    def stop(self, name: str) -> None:
        """End a run whose state is decided, as ``cancel``: nothing more is submitted."""
        self._halt(name, "stop")

    def _halt(self, name: str, how: str) -> None:
        with self.ledger.lock():
            try:
                submission = self.ledger.read(name)
            except KeyError:  # a run's name is its own, whoever's jobs they are
                self.slurm.run(["scancel", *([] if self.team else ["--me"]), f"--name={name}"])
                raise
            if not submission.stopped:
                submission.stopped, submission.stopped_at = how, time.time()
                self._save(submission)
        if any(not j.final for j in submission.jobs):
            self.slurm.run(["scancel", *owners.whose({submission.login}), f"--name={name}"])

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        """The log of each attempt of a task from the store, oldest first; KeyError for an
        unknown run."""
        return joblogs.pod_logs(self.ledger.read(name), task_id, tail_lines)

    def keep_logs(self, name: str, task_id: str, folder: TaskFolder) -> KeptLogs:
        """The jobs write their logs into the store, so there is nothing to copy: complete
        once every attempt of the task ended; no Slurm call. KeyError for an unknown run."""
        return KeptLogs(complete=joblogs.complete(self.ledger.read(name), task_id))

    def describe(self) -> list[str]:
        """The banner's summary: which mode (a scientist as themselves, or a team), whose
        jobs these are, where they go."""
        where = self.where.partition or "the default partition"
        account = f", account {self.where.account}" if self.where.account else ""
        if self.team:
            return [
                f"team mode: each simrun user's jobs are submitted to {where}{account} as the "
                "Unix login mapped to them (simrun user NAME --login LOGIN), never as root; "
                "a user without one cannot submit (docs/slurm.md)"
            ]
        return [
            f"scientist mode: jobs submitted as {getpass.getuser()} to {where}{account}: that "
            "user's account and fairshare pay for every run's jobs (docs/slurm.md)"
        ]

    def isolation_problem(self, owner: int | None = 0, kind: str = "split") -> str | None:
        """Why the jobs of a run cannot run as its owner's login (team mode): the login
        cannot reach the store, or (a split or plugin task) the service's interpreter, whose
        ``simrun-worker`` the jobs run. None as a scientist: the jobs are the service's user's.
        """
        return owners.unreachable(self.team, self.store, kind)

    def choose_node(self, plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()) -> str:
        """The smallest free ready node of the partition that fits the run (``nodes``);
        LookupError saying why when none does, or the service may not reserve nodes."""
        if not self.reserves_nodes:
            raise LookupError(self.no_reservations)
        return choose_node(
            self.nodes(), plans, taken=taken, reservable="the ready nodes of the partition"
        )

    def nodes(self) -> list[NodeInfo]:
        """The nodes of the partition (every partition's without one), from ``sinfo``."""
        argv = ["sinfo", "-h", "-N", "-o", "%N|%c|%m|%t"]
        if self.where.partition:
            argv.append(f"--partition={self.where.partition}")
        found: dict[str, NodeInfo] = {}
        held = reservations.held(self.slurm) if self.reserves_nodes else {}
        for line in self.slurm.run(argv).splitlines():
            parts = line.strip().split("|")
            if len(parts) < 4 or parts[0] in found:
                continue
            state = parts[3].rstrip("*~#!%$@^-")
            found[parts[0]] = NodeInfo(
                name=parts[0],
                cores=float(parts[1]),
                memory_gb=float(parts[2]) / 1024,
                ready=state not in {"down", "drain", "drng", "fail", "maint", "boot", "unk"},
                reservable=self.reserves_nodes,
                reserved_by=held.get(parts[0]),
            )
        return list(found.values())

    def placements(self) -> list[Placement]:
        """The jobs of live runs that have not ended, as the last poll saw them."""
        found = []
        for submission in self.ledger.live():
            for job in submission.jobs:
                if job.final or job.node == slurm_packages.BUILD_NODE:
                    continue
                spec = submission.node(job.node)
                found.append(
                    Placement(
                        workflow=submission.name,
                        dag_task=job.node,
                        pod=job.job_id,
                        node=job.host or None,
                        phase="Running" if job.state in slurm_status.RUNNING else "Pending",
                        cores=spec.cores,
                        memory_gb=job.memory_gb,
                        worker=spec.worker,
                        attempt=job.latest_attempt,
                    )
                )
        return found

    def reserve(self, node: str, run_id: str) -> None:
        """Reserve ``node`` for the run's jobs (a Slurm reservation, ``reservations``);
        ValueError when another run holds it or the service may not reserve nodes, KeyError
        for a node not in the partition."""
        if not self.reserves_nodes:
            raise ValueError(self.no_reservations)
        holder = self._holder(node)
        if holder == run_id:
            return
        if holder is not None:
            raise ValueError(f"the node {node} is reserved by the run {holder}")
        try:
            reservations.create(self.slurm, node, run_id, getpass.getuser())
        except SlurmError as error:
            raise ValueError(f"Slurm refused to reserve {node}: {error}") from None

    def unreserve(self, node: str, run_id: str) -> None:
        """Remove the run's reservation of ``node`` (another run's stays); KeyError for a
        node not in the partition."""
        if self._holder(node) == run_id:
            reservations.delete(self.slurm, run_id)

    def _holder(self, node: str) -> str | None:
        """The run holding ``node``; KeyError for a node not in the partition."""
        found = {n.name: n for n in self.nodes()}
        if node not in found:
            raise KeyError(node)
        return found[node].reserved_by

    def build_image(self, context: Path, ref: str) -> None:
        """Refused: the slurm backend runs no images."""
        raise ValueError("the slurm backend builds no images")

    def has_image(self, ref: str) -> bool:
        """True: the slurm backend needs no image."""
        return True
