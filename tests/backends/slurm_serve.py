"""A team's ``SIMRUN_BACKEND=slurm simrun serve`` on a cluster of ``.ci/slurm``, as a new user
starts it, and what the tests read of it: the jobs it submitted, a task's finished units.

The service runs as root for a team; the user alice is mapped to the Unix login every job
runs as (``TEAM_LOGIN``). Polls every second, so the tests wait seconds, not minutes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.ledger import Ledger
from runs.backends.base import workflow_name
from tests.backends.slurm_cluster import PARTITION, TEAM_LOGIN, cluster_state
from tests.e2e.service import Service, task_user_serve

UID_BASE = 390000
"""The local backend's task users (unused on Slurm; serve checks them all the same)."""
CLUSTER_OPTIONS = {"on": (), "off": ("--accounting=off",)}
"""``.ci/slurm``'s options of the cluster with accounting and of the one without."""
CLUSTER_NAMES = {"on": "simrun", "off": "simrun-noacct"}


def daemon_pid(accounting: str, daemon: str) -> int:
    """The pid of a daemon (``slurmctld``, ``slurmd-n1``) of a cluster of ``.ci/slurm``."""
    run = Path("/var/lib/simrun-slurm") / CLUSTER_NAMES[accounting] / "run"
    return int((run / f"{daemon}.pid").read_text())


@contextmanager
def team_serve(conf: str, **env: str) -> Iterator[tuple[Service, str]]:
    """The team's serve on the cluster of ``conf`` and the token of alice, mapped to the
    team's login; ``env``: more of its settings."""
    slurm = {
        "SIMRUN_BACKEND": "slurm",
        "SIMRUN_SLURM_CONF": conf,
        "SIMRUN_SLURM_PARTITION": PARTITION,
        "SIMRUN_SLURM_TIME_LIMIT": "10",
        "SIMRUN_SLURM_POLL_S": "1",
        "SIMRUN_POLL_S": "1",
        **env,
    }
    with task_user_serve(UID_BASE, **slurm) as service:
        done = subprocess.run(
            [service.simrun, "user", "alice", "--login", TEAM_LOGIN],
            env=service.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        yield service, done.stdout.split("token: ")[1].split()[0]


def ledger_of(service: Service, run_id: str) -> dict[str, Any]:
    """The serve's record of a run's Slurm jobs."""
    path = service.store / "slurm" / "runs" / f"{workflow_name(run_id)}.json"
    return dict(json.loads(path.read_text()))


def jobs_of(service: Service, run_id: str) -> list[dict[str, Any]]:
    """The Slurm jobs the serve submitted for a run, from its record of them."""
    try:
        return list(ledger_of(service, run_id)["jobs"])
    except FileNotFoundError:
        return []


def done_units(service: Service, run_id: str, task: str, units: int) -> set[int]:
    """The units of a task its ledger in the store records as finished."""
    try:
        ledger = Ledger.read(service.store / "runs" / run_id / "tasks" / task / "units")
    except FileNotFoundError:
        return set()
    ledger.refresh()
    return set(ledger.covered([range(units)]))


def polls_failed(service: Service) -> int:
    """How many polls of Slurm in a row failed (the serve's backoff counts them)."""
    try:
        meta = json.loads((service.store / "slurm" / "poll.json").read_text())
    except (OSError, ValueError):
        return 0
    return int(meta.get("failures", 0))


def details(service: Service, conf: str) -> str:
    """What squeue and sinfo say, and the end of the serve's log: a failed wait's details."""
    log = service.log.read_text(errors="replace").splitlines()[-40:]
    return cluster_state(conf) + "serve:\n" + "\n".join(log)
