"""The wall around every process that runs a user's code outside a task: one way to start it.

A learning (the install of a run's sources and ``python -m harness.describe``) and a build of
packages (``environment.packages``, a run's sources in its venv) run the code of a user's
sources as surely as a task does, so they are started as a task is, by ``start`` here:
``python wall.py`` (this file, as root where the service is) reads what to run from an
inherited pipe and then

- becomes the subreaper of what it starts, so a double fork and a ``setsid`` end with it;
- makes a memory and a pids cgroup of its own (its budget: ``Limits``), which it empties
  with a kill at the end, wherever a process of it went; a wall that could not (killed
  outright: a crash, a kill for memory, a restart) leaves its cgroups named for it, and the
  next wall to start, and the local backend's step, kill what is in them (``sweep``);
- counts what it writes into its folders on the store's disk (``wall_disk``: its budget of
  bytes and files, one file at most its bytes), stopping it over its budget;
- moves into a network namespace of its own with only a loopback of its own, so no port of
  the machine's (the web's, the database's, Redis's) is reachable or can be taken; a build
  whose index is on the network gets a proxy there to other machines, never this one
  (``egress``);
- moves into mount and IPC namespaces of its own in which ``/dev/shm``, ``/tmp`` and
  ``/var/tmp`` are tmpfs of its own, charged to its memory cgroup and gone with it (the
  folders the service keeps below them, a store in ``/tmp`` in tests, stay visible), and
  in which the service's folders of users' things (``fenced``) are read-only but the folders
  it writes, which its budget counts (``shm.fence``);
- starts the process in a session of its own as the owner's task user, with no groups,
  killed when the wall dies (``PR_SET_PDEATHSIG``), after its time limit or a SIGTERM of the
  caller, and kills what is left of it at its end;
- writes how it ended (``Ended``) into a second inherited pipe.

A service that is not root has no task users and no namespaces or cgroups to give: the wall
then only bounds the time and kills what the process left (subreaper, session).

``enter`` is what the child does before its exec (join its cgroups, drop to its user): the
launcher's task does the same through it, so no other module changes a process's user
(tests/test_layering.py holds it).

Only the standard library, the harness and siblings imported by their bare names
(``cgroups``, ``egress``, ``launch_file``, ``pids``, ``shm``, ``wall_disk``): the launcher
imports it from its directory, and it runs as a script.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

if __package__:  # imported as a module of the service
    from runs.backends.local import cgroups, pids, wall_disk
    from runs.backends.local.launch_file import Ids
else:  # imported by its bare name: by the launcher, and as a script
    import cgroups  # type: ignore[no-redef]
    import pids  # type: ignore[no-redef]
    import wall_disk  # type: ignore[no-redef]
    from launch_file import Ids  # type: ignore[no-redef]

WALL = Path(__file__)
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sh14x"
"""``struct ifreq`` with its flags: the name of an interface and its flags."""
PR_SET_PDEATHSIG = 1
POLL_S = 0.05
"""Seconds between two looks of the wall at its process (and at a SIGTERM)."""
STOPPED_TIMEOUT, STOPPED_SIGNAL = "timeout", "stopped"
PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
"""The proxy settings of a process's environment (either case), replaced by the wall's own."""
SPEC_CAP = 1 << 22
"""The most the wall reads of what it is told to run."""
BUILD_MEMORY_GB = 2.0
"""The memory of a learning or a build, its ``/tmp`` and ``/dev/shm`` included
(``SIMRUN_BUILD_MEMORY_GB``)."""
BUILD_PIDS_MAX = 512
"""The processes of a learning or a build (``SIMRUN_BUILD_PIDS_MAX``)."""


@dataclass(frozen=True)
class Limits:
    """What one walled process (with all it starts) may hold: memory (its ``/dev/shm`` and
    ``/tmp`` included), processes and time; ``network`` ``own`` (a loopback of its own),
    ``proxy`` (a loopback of its own and a proxy to other machines, never this one:
    ``egress``, for a build whose index is on the network) or ``host`` (the machine's)."""

    memory_bytes: int
    pids_max: int
    timeout_s: float | None
    network: str = "own"


@dataclass(frozen=True)
class Spec:
    """What a wall runs: the command, its environment and folder, as whom, within what."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    user: Ids | None
    limits: Limits
    keep: list[str] = field(default_factory=list)
    """Folders below ``/tmp`` or ``/var/tmp`` that stay visible (the store's, the venvs')."""
    disk: wall_disk.Disk | None = None
    """What it may write into its folders (``wall_disk``), None: not counted."""
    fenced: list[str] = field(default_factory=list)
    """Folders read-only to it but for its counted folders and ``cwd`` (``shm.fence``)."""


@dataclass(frozen=True)
class Ended:
    """How a walled process ended: its exit code as ``Popen.returncode`` (None: the wall
    stopped it), why it was stopped, and the kills of its memory cgroup's OOM killer."""

    returncode: int | None
    stopped: str | None = None
    oom_kills: int = 0

    @property
    def over_disk(self) -> bool:
        """Whether it was stopped over its budget of disk (``wall_disk``)."""
        return (self.stopped or "").startswith(wall_disk.OVER)


class Walled:
    """A walled process being run: ``stop`` asks the wall to end it (and all it started),
    ``wait`` returns how it ended."""

    def __init__(self, process: subprocess.Popen[bytes], verdict: IO[bytes]) -> None:
        self.process = process
        self._verdict = verdict

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)

    def poll(self) -> bool:
        """Whether the wall has ended."""
        return self.process.poll() is not None

    def wait(self) -> Ended:
        self.process.wait()
        with self._verdict:
            raw = self._verdict.read(1 << 16)
        try:
            data = json.loads(raw)
            return Ended(data["returncode"], data.get("stopped"), int(data.get("oom_kills", 0)))
        except (ValueError, KeyError, TypeError):
            return Ended(None, "the wall ended without saying how its process did")


def start(spec: Spec, *, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> Walled:
    """Start ``spec`` behind the wall; ``stdin``, ``stdout``, ``stderr`` as ``Popen`` takes
    them (the process gets them)."""
    told_r, told_w = os.pipe()
    verdict_r, verdict_w = os.pipe()
    text = json.dumps(asdict(spec)).encode()
    try:
        process = subprocess.Popen(
            [sys.executable, str(WALL), str(told_r), str(verdict_w)],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=_wall_env(),
            pass_fds=(told_r, verdict_w),
            start_new_session=True,
        )
    except BaseException:
        for fd in (told_r, told_w, verdict_r, verdict_w):
            os.close(fd)
        raise
    os.close(told_r)
    os.close(verdict_w)
    with os.fdopen(told_w, "wb") as told, contextlib.suppress(BrokenPipeError):
        told.write(text)
    return Walled(process, os.fdopen(verdict_r, "rb"))


def run(spec: Spec, **files: Any) -> Ended:
    """Run ``spec`` behind the wall to its end (``start``, then ``wait``)."""
    return start(spec, **files).wait()


def _wall_env() -> dict[str, str]:
    """The wall's own environment: enough to run Python (the process gets its spec's)."""
    kept = ("PATH", "LANG", "LC_ALL", "TZ")
    return {k: os.environ[k] for k in kept if k in os.environ} | {"PYTHONUNBUFFERED": "1"}


# In the wall's process, and in the child before its exec.


def isolate_network() -> None:
    """Move this process, and all it starts from now on, into a network namespace of its own
    with only a loopback of its own: no port, address or abstract socket of the machine's is
    theirs to take or reach (``SIMRUN_TASK_NETWORK=loopback``, docs/team.md)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(
            error,
            f"its network could not be isolated ({os.strerror(error)}); "
            "SIMRUN_TASK_NETWORK=host gives tasks the machine's network (docs/team.md)",
        )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(IFREQ, b"lo", 0)
        flags = struct.unpack(IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def become(user: Ids) -> None:
    """Drop to a task user for good: no groups, its ids, its umask."""
    os.setgroups([])
    os.setgid(user.gid)
    os.setuid(user.uid)
    os.umask(user.umask)


def enter(
    cgroups: list[Path],
    user: Ids | None,
    *,
    pids_max: int = 0,
    file_bytes: int | None = None,
    die_with_parent: bool = False,
) -> None:
    """In a child before its exec (as root): join its cgroups, cap a file's size at
    ``file_bytes``, then become ``user`` (with ``RLIMIT_NPROC`` at ``pids_max`` where no
    pids cgroup counts its processes) and, with ``die_with_parent``, die with its parent."""
    for path in cgroups:
        (path / "cgroup.procs").write_text(str(os.getpid()))
    if file_bytes is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    if user is not None:
        if pids_max and not any((path / "pids.max").exists() for path in cgroups):
            resource.setrlimit(resource.RLIMIT_NPROC, (pids_max, pids_max))
        become(user)
    if die_with_parent:  # after the change of user, which clears it
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _load(text: bytes) -> Spec:
    data = json.loads(text)
    data["limits"] = Limits(**data["limits"])
    data["user"] = Ids(**data["user"]) if data.get("user") else None
    data["disk"] = wall_disk.Disk(**data["disk"]) if data.get("disk") else None
    return Spec(**data)


WALL_CGROUP = "wall-"
"""How the cgroups of a wall are named: ``wall-<its pid>-<its start time>``."""


def cgroup_name(pid: int) -> str:
    """The name of the cgroups of the wall ``pid`` (a process that runs)."""
    return f"{WALL_CGROUP}{pid}-{pids.process_start(pid)}"


def _orphaned(name: str) -> bool:
    """Whether a cgroup is a wall's whose process is gone, a zombie, or its pid reused since
    (the name of an older wall has no start time: gone only with its pid)."""
    pid, _, start = name.removeprefix(WALL_CGROUP).partition("-")
    if not pid.isdigit():
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return True
    return fields[0] in ("Z", "X") or (start != "" and start != fields[19])


def sweep(parents: list[Path | None]) -> int:
    """Kill what is left in the cgroups of walls that are gone (killed outright: a crash, a
    kill for memory, a restart of the service) and remove them: a process that left its
    wall's session (a double fork, ``setsid``) is still in them. How many went."""
    removed = 0
    for parent in parents:
        if parent is None or not parent.is_dir():
            continue
        for cgroup in parent.glob(f"{WALL_CGROUP}*"):
            if _orphaned(cgroup.name) and cgroups.remove(cgroup):
                removed += 1
    return removed


def _cgroups(limits: Limits, made: list[Path]) -> None:
    """Make a memory and a pids cgroup of this wall's own with its limits (into ``made`` as
    each is made), where the machine lets this process make them (root), after removing
    those of walls gone (``sweep``)."""
    name = cgroup_name(os.getpid())
    hierarchy, pids_parent = cgroups.detect(), cgroups.detect_pids()
    sweep([None if hierarchy is None else hierarchy.parent, pids_parent])
    if hierarchy is not None:
        made.append(cgroups.create(hierarchy, name, limits.memory_bytes))
    if pids_parent is not None:
        path = cgroups.create_pids(pids_parent, name, limits.pids_max)
        if path not in made:  # on cgroup v2, the memory cgroup itself
            made.append(path)


def _walled(spec: Spec, verdict: int) -> int:
    """Run the spec behind the wall (this process: see the module's docstring)."""
    import egress
    import shm

    pids.become_subreaper()
    stopping: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(STOPPED_SIGNAL))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    limits, walls = spec.limits, os.geteuid() == 0
    made: list[Path] = []
    env, proxy, count = dict(spec.env), None, None
    ended = Ended(None, "not started")
    try:
        if walls:
            _cgroups(limits, made)
            if limits.network == "proxy":  # its dialer stays in the machine's network
                proxy = egress.Proxy(egress.start_dialer(), bind=isolate_network)
                env = {k: v for k, v in env.items() if k.lower() not in PROXY_VARIABLES}
                env |= dict.fromkeys(("HTTPS_PROXY", "HTTP_PROXY"), proxy.url)
            elif limits.network == "own":
                isolate_network()
            shm.private_mounts(limits.memory_bytes, 1 << 16, spec.keep)
            shm.fence(spec.fenced, [*(spec.disk.counted if spec.disk else []), spec.cwd])
        if spec.disk is not None:
            count = wall_disk.Count(spec.disk)
        file_bytes = None if spec.disk is None else spec.disk.bytes
        child = subprocess.Popen(
            spec.argv,
            env=env,
            cwd=spec.cwd,
            start_new_session=True,
            # The wall is single-threaded: a function before the exec is safe here.
            preexec_fn=lambda: enter(
                made,
                spec.user if walls else None,
                pids_max=limits.pids_max,
                file_bytes=file_bytes,
                die_with_parent=True,
            ),
        )
        if proxy is not None:
            proxy.start()  # threads only once the child is forked
        ended = _wait(child.pid, limits.timeout_s, stopping, count)
    except (OSError, subprocess.SubprocessError) as error:
        # Said on its output: the caller quotes the output's last lines.
        print(f"simrun: the process could not be started behind its wall: {error}", flush=True)
        ended = Ended(None, f"could not be started: {error}")
    finally:
        pids.signal_tree(signal.SIGKILL)
        pids.end_tree()
        oom = sum(cgroups.oom_kills(path) for path in made)
        for path in made:
            cgroups.remove(path)
    if count is not None and (over := count.over()) is not None:  # what it wrote last
        ended = Ended(None, over)
    ended = Ended(ended.returncode, ended.stopped, oom)
    os.write(verdict, json.dumps(asdict(ended)).encode())
    return 0


def _wait(
    pid: int, timeout_s: float | None, stopping: list[str], count: wall_disk.Count | None
) -> Ended:
    """Wait for the process, reaping every orphan meanwhile; stop it (and all below it) at
    its time limit, on the caller's SIGTERM or over its budget of disk (``count``)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(ChildProcessError):
            while (found := os.waitpid(-1, os.WNOHANG))[0] > 0:
                if found[0] == pid:
                    return Ended(os.waitstatus_to_exitcode(found[1]))
        why = stopping[0] if stopping else None
        if why is None and deadline is not None and time.monotonic() > deadline:
            why = STOPPED_TIMEOUT
        if why is None and count is not None and count.due():
            why = count.over()
        if why is not None:
            pids.signal_tree(signal.SIGKILL)
            pids.end_tree()
            return Ended(None, why)
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isdigit() for a in argv):
        print("usage: wall.py SPEC_FD VERDICT_FD", file=sys.stderr)
        return 2
    with os.fdopen(int(argv[0]), "rb") as told:
        spec = _load(told.read(SPEC_CAP))
    return _walled(spec, int(argv[1]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
