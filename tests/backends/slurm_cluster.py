"""The real Slurm cluster of the Slurm backend's tests (``.ci/slurm``) and their helpers.

The cluster is started once per session by the project's script; a cluster that cannot start
fails the tests, never skips them: there is no fake of Slurm.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import suppress
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness.tasktypes import task_types
from runs.backends.base import (
    BackendUnavailable,
    ClusterConfig,
    RunRecord,
    TaskPlan,
    TaskRecord,
    workflow_name,
)
from runs.backends.slurm.backend import SlurmBackend
from runs.backends.slurm.commands import Slurm
from runs.backends.slurm.script import Placement
from tests.polling import wait_for

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "slurm"
PARTITION = "simrun"


@cache
def cluster(*args: str) -> str:
    """The cluster of ``.ci/slurm`` (``args``: its options), started once a session."""
    return start_cluster(*args)


def start_cluster(*args: str) -> str:
    """Start (or reuse) the cluster with ``.ci/slurm``; its SLURM_CONF. Fails when it cannot."""
    done = subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f".ci/slurm failed:\n{done.stdout}\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("SLURM_CONF=")]
    return lines[-1].partition("=")[2]


TEAM_LOGIN = "simrun-team"
"""The Unix login ``.ci/slurm`` makes (with an association) for the tests of the team mode."""


def make_backend(
    store: Path, conf: str, poll_s: float = 0.5, *, team: bool = False
) -> SlurmBackend:
    """A backend on the test cluster polling every ``poll_s``; ``team``: in team mode (the
    tests run as root), else as a scientist submitting as the tests' own user."""
    return SlurmBackend(
        store,
        slurm=Slurm(conf=conf),
        where=Placement(partition=PARTITION, time_limit="10"),
        poll_s=poll_s,
        grace_s=2.0,
        team=team,
    )


def plan(
    cores: int = 1,
    memory_gb: float = 0.25,
    retry_memory_gb: float = 0.5,
    workers: int = 1,
    coordinator_merges: bool = True,
) -> TaskPlan:
    return TaskPlan(
        cores=cores,
        memory_gb=memory_gb,
        workers=workers,
        base_gb=0.0,
        per_worker_gb=memory_gb,
        retry_memory_gb=retry_memory_gb,
        coordinator_merges=coordinator_merges,
    )


def submit(
    backend: SlurmBackend,
    run_id: str,
    tasks: dict[str, dict[str, Any]],
    plans: dict[str, TaskPlan] | None = None,
    login: str = "",
    packages: tuple[str, ...] = (),
    reserved_node: str = "",
) -> str:
    """Write each task's task.json as the service does, then submit the run (command tasks by
    default) of an owner mapped to ``login``, in an environment with ``packages``."""
    plans = {task_id: (plans or {}).get(task_id, plan()) for task_id in tasks}
    records = {}
    for task_id, fields in tasks.items():
        fields = {"kind": "command"} | fields
        records[task_id] = TaskRecord(id=task_id, **fields)
        folder = backend.store / "runs" / run_id / "tasks" / task_id
        folder.mkdir(parents=True, exist_ok=True)
        settings = fields.get("settings", {})
        (folder / "task.json").write_text(
            json.dumps(
                {
                    "run": run_id,
                    "task": task_id,
                    "kind": fields["kind"],
                    "type": fields.get("type", ""),
                    "settings": settings,
                    "inputs": fields.get("inputs", {}),
                    "command": fields.get("command", []),
                    "plan": plans[task_id].model_dump(mode="json"),
                    "units": settings.get("n", 1),
                }
            )
        )
    run = RunRecord(
        id=run_id,
        tasks=records,
        store=backend.store,
        login=login,
        packages=list(packages),
        reserved_node=reserved_node,
    )
    return backend.submit(run, plans, task_types(), ClusterConfig())


def polled_phase(backend: SlurmBackend, run_id: str, node: str | None = None) -> str | None:
    """A run's phase (or a node's) after a poll now; None while Slurm's controller does not
    answer (a test before may have just started it again), as the service waits for it."""
    try:
        backend.poll(force=True)
    except BackendUnavailable:
        return None
    status = backend.status(workflow_name(run_id))
    return status.tasks.get(node) if node else status.phase


def wait_phase(
    backend: SlurmBackend, run_id: str, phases: set[str], node: str | None = None, timeout_s=120
) -> str:
    """Wait until a run (or a node) is in one of ``phases``; its phase."""
    found = wait_for(
        lambda: (p := polled_phase(backend, run_id, node)) in phases and p,
        timeout_s=timeout_s,
        interval_s=0.5,
        what=f"{run_id} {node or ''} in {sorted(phases)}",
        details=lambda: backend.status(workflow_name(run_id)).model_dump_json(indent=1),
    )
    return str(found)


def started_run(spec: dict[str, Any], owner: Any, backend: SlurmBackend) -> Any:
    """A run of ``spec`` created and submitted by the service, as ``simrun serve`` does."""
    from runs.control import submitting
    from runs.planning.spec_document import parse_spec
    from runs.planning.submission import create_run

    run = create_run(spec=parse_spec(yaml.safe_dump(spec), types=task_types()), owner=owner)
    assert submitting.submit(run.id, backend=backend)
    return run


def service_pass(backend: SlurmBackend, run: Any) -> Any:
    """One pass of the service's control loop (a poll now, then the reconcile); the run."""
    from runs.control import reconciling
    from runs.models import Run

    with suppress(BackendUnavailable):  # the service waits for a controller that does not answer
        backend.poll(force=True)
    reconciling.reconcile_pass(backend=backend)
    return Run.objects.get(pk=run.pk)


def run_to_end(backend: SlurmBackend, run: Any, timeout_s: float = 300) -> Any:
    """Drive the control loop until the run ended; the run."""
    from runs.models import RunState, Task

    ends = {RunState.SUCCEEDED, RunState.FAILED}
    return wait_for(
        lambda: (current := service_pass(backend, run)).state in ends and current,
        timeout_s=timeout_s,
        interval_s=1,
        what=f"run {run.id} to end",
        details=lambda: "\n".join(
            (
                str(list(Task.objects.filter(run=run).values("task_id", "state"))),
                cluster_state(backend.slurm.conf),
            )
        ),
    )


def shell(script: str) -> list[str]:
    return ["sh", "-c", script]


def slurm_command(conf: str, *argv: str) -> str:
    """A Slurm command run by the test itself (as an administrator would); its output."""
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "SLURM_CONF": conf},
    )
    return done.stdout


def accounted_user(conf: str, job_id: str) -> str:
    """The user sacct records for a job (as an administrator asks it: every user's)."""
    out = slurm_command(conf, "sacct", "-n", "-P", "-X", "--allusers", "-j", job_id, "-o", "User")
    return out.strip()


def cluster_state(conf: str) -> str:
    """What squeue and sinfo say of every job and node: the details of a wait that failed."""
    jobs = slurm_command(conf, "squeue", "-a", "-t", "all", "-o", "%i %P %u %T %r %N")
    nodes = slurm_command(conf, "sinfo", "-N", "-o", "%N %P %T %E")
    return f"squeue:\n{jobs}sinfo:\n{nodes}"


def emptied_cluster(conf: str) -> str:
    """Cancel every job an earlier test left and wait until no job holds a node; ``conf``.
    A test that counts on free nodes starts from them, whatever ran before it."""
    jobs = slurm_command(conf, "squeue", "-a", "-h", "-o", "%i").split()
    if jobs:
        slurm_command(conf, "scancel", "--full", *jobs)
    wait_for(
        lambda: not slurm_command(conf, "squeue", "-a", "-h", "-t", "PD,R,CG,S,CF,RQ,RS"),
        what="the cluster's jobs to end",
        details=lambda: cluster_state(conf),
    )
    return conf


def job_state(conf: str, job_id: str) -> str:
    """A job's state in squeue; empty once Slurm forgot it."""
    done = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": conf},
    )
    return done.stdout.strip()
