"""Node reservations on Slurm: a run that asks for a node of its own gets a Slurm reservation.

A reservation (``scontrol create reservation``) needs Slurm's Operator level: the service
offers reservations only where its user has it (root or ``SlurmUser``, else the ``AdminLevel``
that ``sacctmgr`` records: Operator or Administrator), and says why not elsewhere. The
reservation of run R is ``simrun-R`` on one node, from now without end, for the user whose
jobs are the run's (``IGNORE_JOBS``: the jobs already running there end as they would; no new
job of another may start there). The run's jobs are submitted with ``--reservation``.
"""

from __future__ import annotations

import getpass
import os

from runs.backends.slurm.commands import Slurm, SlurmError

PREFIX = "simrun-"
"""A reservation of simrun's is ``simrun-<run id>``."""
LEVELS = {"operator", "administrator"}
"""The ``AdminLevel``s that may create reservations."""


def name(run_id: str) -> str:
    """The name of the reservation of a run."""
    return f"{PREFIX}{run_id}"


def problem(slurm: Slurm, user: str | None = None) -> str | None:
    """Why ``user`` (the service's own by default) may not create reservations, in words for
    the refusal of ``reserve_node``; None when it may."""
    user = user or getpass.getuser()
    config = slurm.run(["scontrol", "show", "config"])
    slurm_user = next(
        (
            line.partition("=")[2].strip().partition("(")[0]
            for line in config.splitlines()
            if line.split("=")[0].strip() == "SlurmUser"
        ),
        "",
    )
    if user == slurm_user or (user == getpass.getuser() and os.geteuid() == 0):
        return None
    try:
        level = slurm.run(["sacctmgr", "-n", "-P", "show", "user", user, "format=adminlevel"])
    except SlurmError:
        level = ""  # no accounting: only root and SlurmUser may
    if level.strip().lower() in LEVELS:
        return None
    said = level.strip() or "unknown: no accounting"
    return (
        f"the slurm backend reserves no nodes here: a reservation needs Slurm's Operator level, "
        f"which {user} lacks (its AdminLevel is {said}; an administrator grants it with "
        f"`sacctmgr modify user {user} set adminlevel=operator`): submit without reserve_node"
    )


def held(slurm: Slurm) -> dict[str, str]:
    """The run holding each node reserved by simrun, from ``scontrol show reservation``."""
    found: dict[str, str] = {}
    for line in slurm.run(["scontrol", "-o", "show", "reservation"]).splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        reservation = fields.get("ReservationName", "")
        if not reservation.startswith(PREFIX):
            continue
        for node in expand(slurm, fields.get("Nodes", "")):
            found[node] = reservation.removeprefix(PREFIX)
    return found


def expand(slurm: Slurm, nodes: str) -> list[str]:
    """The names of a Slurm host list (``n[1-2]``)."""
    if not nodes or nodes == "(null)":
        return []
    if "[" not in nodes:
        return nodes.split(",")
    return slurm.run(["scontrol", "show", "hostnames", nodes]).split()


def create(slurm: Slurm, node: str, run_id: str, user: str) -> None:
    """Reserve ``node`` for the jobs of ``run_id``, which run as ``user``."""
    slurm.run(
        [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={name(run_id)}",
            f"Nodes={node}",
            "StartTime=now",
            "Duration=infinite",
            f"Users={user}",
            "Flags=IGNORE_JOBS",
        ]
    )


def admit(slurm: Slurm, run_id: str, login: str) -> None:
    """Let the jobs of ``login`` (a run's, in team mode) into the run's reservation."""
    slurm.run(["scontrol", "update", f"ReservationName={name(run_id)}", f"Users+={login}"])


def delete(slurm: Slurm, run_id: str) -> None:
    """Remove the reservation of ``run_id`` (none there: nothing to do)."""
    try:
        slurm.run(["scontrol", "delete", f"ReservationName={name(run_id)}"])
    except SlurmError as error:
        if "reservation is invalid" not in str(error).lower():
            raise
