"""Whose jobs they are: the service's own user, or (team mode) each simrun user's Unix login.

Run by a scientist as themselves, the service submits every job as its own user, and asks
Slurm about its own jobs (``--me``). Run as root for a team, it submits each run's jobs as the
Unix login mapped to the run's owner (``sbatch --uid --gid``, which only root may give), never
as root, and hands the run's folder in the store to that login so the jobs can write their
outputs, ledger and logs there; it then asks Slurm about those logins' jobs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness import untrusted
from runs.backends.local.user import TaskUser, give
from runs.backends.local.user import unreachable as unreachable_roots
from runs.common.logins import login_ids, login_problem
from runs.common.store import pass_only

MAP_ONE = "an administrator maps one with `simrun user NAME --login LOGIN`"


def refusal(team: bool, login: str) -> str | None:
    """Why a run whose owner is mapped to ``login`` cannot be submitted, None when it can."""
    if not team:
        return None
    if not login:
        return (
            "this service submits Slurm jobs for a team (it runs as root and never submits as "
            f"root), and this user has no Unix login to submit them as: {MAP_ONE}"
        )
    if problem := login_problem(login):
        return f"the Unix login mapped to this user cannot submit Slurm jobs: {problem}; {MAP_ONE}"
    return None


def unreachable(team: bool, store: Path, kind: str) -> str | None:
    """Why the logins' jobs cannot reach the store (or, for a task of ``kind`` split or
    plugin, the service's interpreter), None when they can or jobs are the service's."""
    if not team:
        return None
    roots = [store] if kind == "command" else [store, Path(sys.executable).resolve()]
    return unreachable_roots(*roots, otherwise="")  # a root service never submits as root


def sbatch_flags(login: str) -> list[str]:
    """The ``sbatch`` options that make the job ``login``'s (none for the service's own)."""
    if not login:
        return []
    uid, gid = login_ids(login)
    return [f"--uid={uid}", f"--gid={gid}"]


def whose(logins: set[str]) -> list[str]:
    """The option that selects the jobs of these logins (``--me`` for the service's own)."""
    named = sorted(login for login in logins if login)
    return [f"--user={','.join(named)}"] if named else ["--me"]


def task_user(login: str) -> TaskUser:
    """The ids a login's files get: its own user, the service's group (which reads them)."""
    uid, gid = login_ids(login)
    return TaskUser(uid=uid, gid=gid, service_gid=os.getegid())


def hand_over_run(store: Path, run: str, login: str) -> None:
    """Let ``login`` pass the store's roots and give it the run's folder, its tasks' folders
    and what is in them (``task.json``), so its jobs write there."""
    pass_only(store, store / "runs")
    with untrusted.directory(store, ("runs", run)) as fd:
        give(fd, task_user(login), depth=3)


def logs_dir(store: Path, parts: tuple[str, ...], login: str) -> None:
    """A task's ``logs/`` made (if missing) and given to ``login``, whose jobs write there."""
    fd = untrusted.make_dirs(store, parts, mode=0o2770)
    try:
        give(fd, task_user(login), depth=0)
    finally:
        os.close(fd)
