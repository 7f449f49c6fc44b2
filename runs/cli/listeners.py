"""Who listens on a TCP port of this machine: what serve names when its port is taken.

With ``SIMRUN_TASK_NETWORK=host`` a task may bind the web port while serve is stopped; serve
then refuses to start, and says who holds the port (its process, its user, and whether that
user is a task user of this service), so the operator can stop the squatter instead of
guessing. Read from ``/proc/net/tcp`` and ``tcp6`` (the listening sockets and their owners'
uids) and each process's descriptors (only root sees every one): Linux only, none elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"
"""The state of a listening socket in ``/proc/net/tcp``."""


@dataclass(frozen=True)
class Listener:
    """A socket listening on the port: its owner's uid and the processes holding it."""

    uid: int
    pids: tuple[int, ...]

    def describe(self, task_uid_base: int | None = None) -> str:
        """``uid 330002 (the task user of simrun user 2), pid 4242: python3 -c …``."""
        who = f"uid {self.uid}"
        if task_uid_base and self.uid > task_uid_base:
            who += f" (the task user of simrun user {self.uid - task_uid_base})"
        else:
            with contextlib.suppress(KeyError):
                who += f" ({pwd.getpwuid(self.uid).pw_name})"
        if not self.pids:
            return who
        pid = self.pids[0]
        return f"{who}, pid {pid}: {_command(pid)}"


def listeners(port: int, proc: Path = Path("/proc")) -> list[Listener]:
    """The sockets listening on ``port`` (any address), by the uid that made them."""
    inodes: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (proc / "net" / table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state, uid, inode = fields[1], fields[3], fields[7], fields[9]
                if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                    inodes[inode] = int(uid)
    holders: dict[str, list[int]] = {inode: [] for inode in inodes}
    if inodes:
        _holders(proc, holders)
    return [Listener(uid, tuple(sorted(holders[inode]))) for inode, uid in inodes.items()]


def _holders(proc: Path, holders: dict[str, list[int]]) -> None:
    """Fill ``holders`` (socket inode: pids) from every process's descriptors we may read."""
    wanted = {f"socket:[{inode}]": inode for inode in holders}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(entry / "fd"):
                with contextlib.suppress(OSError):
                    if (inode := wanted.get(os.readlink(fd.path))) is not None:
                        holders[inode].append(int(entry.name))
                        break


def _command(pid: int) -> str:
    """A process's command line, cut to 120 characters."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return text if len(text) <= 120 else text[:119] + "…"
