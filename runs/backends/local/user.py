"""Who the processes of the local backend run as, and the file modes that keep them apart.

A service that runs as root starts each process as an unprivileged user of its own: the
user with the id ``SIMRUN_TASK_UID_BASE + the owner's id`` (and a group of the same id), so
the tasks of two users never share one. Nothing needs to exist in ``/etc/passwd``: the
process gets ``HOME``, ``USER`` and ``LOGNAME`` in its environment. The run's directory in
the store belongs to that user (group: the service's, so the service reads it), the store
and scratch roots let it pass without listing them, and the files of the backend
(``logs/``: launch, pid, exit files and logs) stay the service's, out of the task's reach.

A service that does not run as root cannot change users: its processes run as the service's
own user, with only the environment and working directory kept to what they need
(docs/cli.md says what that leaves reachable).
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import untrusted

RUN_DIR_MODE = 0o2770
"""A run's directories: its task user and the service's group; new entries keep the group."""
RUN_FILE_MODE = 0o660
UMASK = 0o007
"""What a task creates is its own and the service's group's, nobody else's."""


@dataclass(frozen=True)
class TaskUser:
    """The user and group ids a process runs as, and the group the service reads through."""

    uid: int
    gid: int
    service_gid: int

    @property
    def name(self) -> str:
        return f"simrun-task-{self.uid}"


def for_owner(owner_id: int | None, uid_base: int | None) -> TaskUser | None:
    """The task user of a run's owner; None when the service cannot change users (not root)
    or isolation is off (no ``uid_base``)."""
    if uid_base is None or owner_id is None or os.geteuid() != 0:
        return None
    uid = uid_base + owner_id
    return TaskUser(uid=uid, gid=uid, service_gid=os.getegid())


def unreachable(
    *roots: Path,
    otherwise: str = (
        "set SIMRUN_TASK_UID_BASE=0 to run tasks as the service "
        "(`simrun serve --tasks-as-service` does that; docs/team.md)"
    ),
) -> str | None:
    """Why a task user cannot reach these roots (a folder above one lets no other user pass),
    with the fixes that apply to that root and ``otherwise``, the way out without task users
    (empty: none); None when it can. A root itself is the backend's to open up
    (``runs.common.store.pass_only``)."""
    for root in roots:
        for folder in root.resolve().parents:
            if folder.exists() and not folder.stat().st_mode & 0o001:
                fixes = _fixes(root, folder) + (f", or {otherwise}" if otherwise else "")
                return (
                    f"{folder} lets no other user pass, so the tasks' users cannot reach "
                    f"{root}: {fixes}"
                )
    return None


def _fixes(root: Path, folder: Path) -> str:
    """What lets the task users reach ``root`` below ``folder``: another Python for this one
    (a home's folder is better left closed), else that folder opened or the home moved."""
    if root == Path(sys.executable).resolve():
        return (
            f"run simrun from a Python every user may run, outside {folder} (a venv of "
            "/usr/bin/python3: /usr/bin/python3 -m venv /opt/simrun && /opt/simrun/bin/pip "
            "install -e '.[service]')"
        )
    return f"chmod o+x {folder}, move SIMRUN_HOME (or SIMRUN_STORE and SIMRUN_SCRATCH)"


def give(
    dir_fd: int, user: TaskUser, *, skip: frozenset[str] = frozenset(), depth: int = 3
) -> None:
    """Hand a directory (by descriptor) and what is in it (``depth`` levels) to a task user;
    entries named in ``skip`` stay the service's. Every entry is opened without following a
    link and changed through its descriptor, so a link a task planted changes nothing, and
    only what the service made or the task user owns is changed (``_own``), so neither does a
    hard link."""
    _own(dir_fd, user)
    if depth == 0:
        return
    for entry in untrusted.entries(dir_fd):
        if entry.name in skip or not (entry.is_dir or entry.is_file):
            continue
        try:
            fd = os.open(entry.name, untrusted.FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue  # replaced meanwhile (by a link, say): not followed
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                give(fd, user, skip=skip, depth=depth - 1)
            elif stat.S_ISREG(os.fstat(fd).st_mode):
                _own(fd, user)
        finally:
            os.close(fd)


def _own(fd: int, user: TaskUser) -> None:
    """Give an entry (by descriptor) to a task user if it may be given: the service's own or
    the task user's already and, for a file, its only name. ``O_NOFOLLOW`` does not stop a hard
    link: one a task made in its run's folder to a file of the service's user (the database,
    the secret key) is that file, and is left as it is."""
    status = os.fstat(fd)
    if status.st_uid not in (os.geteuid(), user.uid):
        return
    if not stat.S_ISDIR(status.st_mode) and status.st_nlink != 1:
        return
    if status.st_uid == user.uid and status.st_gid == user.service_gid:
        return
    os.fchown(fd, user.uid, user.service_gid)
    os.fchmod(fd, RUN_DIR_MODE if stat.S_ISDIR(status.st_mode) else RUN_FILE_MODE)


def keep(dir_fd: int, user: TaskUser) -> None:
    """A directory of the service inside a task's (by descriptor, ``untrusted.service_dir``):
    the service's group reads it, no task."""
    os.fchown(dir_fd, os.geteuid(), user.service_gid)
    os.fchmod(dir_fd, untrusted.SERVICE_DIR_MODE)
