"""The venvs of the local backend: an environment's packages, and a run's source snapshots.

A run whose ``environment.packages`` name packages runs in the venv of those packages, what an
image with them is on a cluster: made once per content (the packages, the service's Python,
who builds it) under ``<store>/environments/<key>/`` by the launcher of the first process that
needs it (``ensure_packages``, never in a web request), kept and shared by every run naming the
same packages, as the owner's task user where tasks run as their owners', within a time limit,
pip's output in that process's log (bounded) and its last lines in the failure. A wheel cache
per builder (``<store>/environments/cache/``) makes the next build of the same packages fast.

A run with snapshots gets a venv of its own, created when its first process starts (by its
launcher, under a file lock, so the processes of a run that start together wait for one venv)
and removed at the end of the run: the run's snapshots installed editable, never into the
service's environment. Both see the packages of the service's environment (simrun, the task
types, the build backends) beneath their own; a run's venv sees its packages' venv between.

Only the standard library, the harness and its siblings ``builds`` (the processes of builds
and who runs them), ``wall`` and ``wall_disk``: the launcher imports this module from its
directory, and this module its siblings by their bare names there, by their full names in the
service.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from harness import untrusted, venvs
from harness.sources import InstallFailed

if __package__:  # imported as a module of the service
    from runs.backends.local import builds, wall, wall_disk
else:  # imported by its bare name: by the launcher and the builders, from this directory
    import builds  # type: ignore[no-redef]
    import wall  # type: ignore[no-redef]
    import wall_disk  # type: ignore[no-redef]

ENVIRONMENTS = venvs.ENVIRONMENTS
python = venvs.python
make_venv = venvs.make_venv
install_packages = venvs.install_packages
packages_key = venvs.packages_key
pip_env = venvs.pip_env

READY = ".simrun-ready"
"""The marker of a venv whose snapshots are installed."""
CACHE = "cache"
"""The folder of the wheel caches in ``ENVIRONMENTS``, one per builder."""


def _create(directory: Path, snapshots: list[Path], base: Path | None = None) -> None:
    """A venv on the service's packages (and ``base``'s), with the snapshots installed
    editable."""
    from harness.sources import install_editable

    make_venv(directory, base)
    install_editable(
        [str(s) for s in snapshots], python=str(python(directory)), root=directory / "sources"
    )


def ensure(
    directory: Path,
    snapshots: list[Path],
    *,
    user: builds.Builder | None = None,
    base: Path | None = None,
    timeout_s: float | None = None,
) -> Path:
    """The interpreter of the venv of a run, created with its snapshots on first use, on the
    packages' venv ``base`` if the run has one.

    Installing sources runs their build code: the venv is made by a process of its own behind
    its wall (``isolated``), as ``user`` (the service's user, with no more than the
    environment of a build, when None), stopped after ``timeout_s``."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _ready(directory):
            # What a build left there is the task user's and may be of any depth: removed
            # without recursion (shutil's recursion raised RecursionError past ~1000 levels,
            # which ignore_errors does not catch) and without following a link.
            untrusted.remove_tree(directory.parent, [directory.name])
            try:
                builder = user or builds.Builder(env=builds.build_env(directory))
                isolated(directory, snapshots, builder, base, timeout_s)
            except BaseException:
                untrusted.remove_tree(directory.parent, [directory.name])  # what it wrote
                raise
            # The venv is the task user's by now: the mark is made through its folder's
            # descriptor, never through a link its build code planted.
            with untrusted.directory(directory.parent, [directory.name]) as folder:
                flags = untrusted.WRITE_FLAGS | os.O_CREAT
                os.close(os.open(READY, flags, 0o644, dir_fd=folder))
    return python(directory)


def _ready(directory: Path) -> bool:
    """Whether a venv was made to its end (its mark is there, a link is no mark)."""
    try:
        with untrusted.directory(directory.parent, [directory.name]) as folder:
            return stat.S_ISREG(os.stat(READY, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class Ran:
    """How a bounded child ended: its exit code (None: killed at its timeout), its output,
    and whether it was killed over its budget of disk (``wall_disk``)."""

    returncode: int | None
    stdout: str
    stderr: str
    over_disk: bool = False


def said_by_the_wall(ended: wall.Ended, memory_bytes: int) -> str:
    """What the wall adds to a process's output: a kill for memory, a start that failed."""
    if ended.oom_kills:
        return (
            f"\nkilled for memory: over its budget of {memory_bytes / 2**30:g} GiB "
            "(SIMRUN_BUILD_MEMORY_GB)"
        )
    if ended.stopped not in (None, wall.STOPPED_TIMEOUT, wall.STOPPED_SIGNAL):
        return f"\n{ended.stopped}"
    return ""


def run_bounded(
    argv: list[str],
    user: builds.Builder,
    *,
    cwd: Path,
    timeout_s: float | None,
    stdin: str = "",
) -> Ran:
    """Run code of a user's sources as ``user`` behind its wall (``wall``), stopped with all
    it started after ``timeout_s``; its output goes to unnamed files, not pipes."""
    with (
        tempfile.TemporaryFile() as given,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        given.write(stdin.encode())
        given.seek(0)
        ended = wall.run(user.walled(argv, cwd, timeout_s), stdin=given, stdout=out, stderr=err)
        code = None if ended.stopped == wall.STOPPED_TIMEOUT else ended.returncode
        if code is None and ended.stopped != wall.STOPPED_TIMEOUT:
            code = -signal.SIGKILL.value
        said = said_by_the_wall(ended, user.memory_bytes)
        return Ran(code, builds.end_of(out), builds.end_of(err) + said, ended.over_disk)


class BuildTimeout(Exception):
    """Making a venv from sources took longer than it may; the message says how long."""


def isolated(
    directory: Path,
    snapshots: list[Path],
    user: builds.Builder,
    base: Path | None = None,
    timeout_s: float | None = None,
) -> None:
    """Make the venv in a child process as ``user``, printing its one line of output;
    ``InstallFailed`` (a ``CalledProcessError`` said as pip's reason, never as the command
    line) whose ``output`` is the tail of pip's output when it fails,
    ``BuildTimeout`` (with that tail) when it takes longer than ``timeout_s``."""
    directory.mkdir(parents=True)
    if user.uid is not None:
        os.chown(directory, user.uid, user.gid if user.gid is not None else -1)
    argv = [
        sys.executable,
        __file__,
        "sources",
        str(directory),
        str(base or ""),
        *map(str, snapshots),
    ]
    done = run_bounded(argv, user, cwd=directory, timeout_s=timeout_s)
    said = done.stdout.strip()
    output = "\n".join([said, done.stderr.strip()]).strip()
    if done.returncode is None:
        raise BuildTimeout(
            f"the install of the sources did not end within {timeout_s:g} s and was stopped"
            + (f":\n{output}" if output else "")
        )
    if done.returncode != 0:
        raise InstallFailed(done.returncode, argv, output=output)  # said as pip's reason
    if said:
        print(said, flush=True)


def remove(directory: Path) -> None:
    """Remove the venv of a run (at its end), however deep its build made it, and its lock."""
    untrusted.remove_tree(directory.parent, [directory.name])
    directory.with_name(directory.name + ".lock").unlink(missing_ok=True)


# The venvs of the packages of environments.


class PackagesError(Exception):
    """The packages of an environment cannot be installed; the message says why, with the
    last lines of pip's output."""


@dataclass(frozen=True)
class Install:
    """An install of an environment's packages: what, as whom, where, within what limits."""

    store: Path
    packages: tuple[str, ...]
    timeout_s: float
    uid: int | None = None
    """The builder: the owner's task user, None for the service's own user."""
    gid: int | None = None
    kept: int = 8
    """The venvs of packages kept under the store per builder (a user's task user); the
    least recently used of that builder beyond go."""
    cache_gb: float = 5.0
    """The builder's wheel cache is emptied after an install that left it larger."""
    pip_env: Mapping[str, str] = field(default_factory=dict)
    memory_bytes: int = int(wall.BUILD_MEMORY_GB * 2**30)
    """The memory of the build (its wall's budget), its ``/tmp`` and ``/dev/shm`` included."""
    pids_max: int = wall.BUILD_PIDS_MAX
    disk: wall_disk.Disk = field(default_factory=wall_disk.Disk)
    """What the build may write in its venv and its wheel cache together."""
    fenced: tuple[str, ...] = ()
    """The folders of users' things, read-only to the build but for its venv and its wheel
    cache (``shm.fence``)."""

    @property
    def key(self) -> str:
        return packages_key(self.packages, self.uid)

    @property
    def directory(self) -> Path:
        return self.store / ENVIRONMENTS / self.key


def _environments(store: Path) -> int:
    """The service's folder of the packages' venvs (a descriptor), made if missing; the task
    users pass it without listing it."""
    store.mkdir(parents=True, exist_ok=True)
    fd = untrusted.service_dir(store, [ENVIRONMENTS])
    os.fchmod(fd, untrusted.SERVICE_DIR_MODE | 0o001)
    return fd


def _mark(key: str) -> str:
    """The mark of a venv of packages installed to its end: the service's file beside it."""
    return f"{key}.json"


def _packages_ready(folder: int, key: str) -> bool:
    try:
        untrusted.read_own(folder, _mark(key), 1 << 16)
    except OSError:
        return False
    return True


def ensure_packages(
    install: Install, cancelled: Callable[[], bool] = lambda: False
) -> tuple[Path, IO[str]]:
    """The interpreter of the venv of an environment's packages, installed on first use, and
    the lock that keeps the venv while the caller uses it (a shared lock: close it after).

    One build at a time per venv; whoever waited for a build that failed fails with it, not
    with a build of their own. ``PackagesError`` when pip fails or takes longer than the
    install's time limit; ``InterruptedError`` once ``cancelled`` says so.
    """
    folder = _environments(install.store)
    try:
        lock = _open_lock(folder, install.key)
        try:
            asked = time.time()
            _lock(lock, fcntl.LOCK_SH, cancelled)
            if _packages_ready(folder, install.key):
                print(f"the environment's packages are installed already: {install.directory}")
            else:
                _lock(lock, fcntl.LOCK_EX, cancelled)
                if not _packages_ready(folder, install.key):
                    _build(install, folder, asked, cancelled)
                fcntl.flock(lock, fcntl.LOCK_SH)
            os.utime(lock.fileno())  # used now: the last to go when venvs are removed
            sys.stdout.flush()
        except BaseException:
            lock.close()
            raise
    finally:
        os.close(folder)
    return python(install.directory), lock


def _open_lock(folder: int, key: str) -> IO[str]:
    """The lock file of a venv of packages, the service's, in the folder of the venvs."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(f"{key}.lock", flags, 0o640, dir_fd=folder), "r+")


def _lock(lock: IO[str], how: int, cancelled: Callable[[], bool]) -> None:
    """Take a lock, looking at ``cancelled`` while another holds it."""
    while True:
        try:
            fcntl.flock(lock, how | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if cancelled():
                raise InterruptedError("stopped on SIGTERM before it started") from None
            time.sleep(builds.POLL_S)


def _build(install: Install, folder: int, asked: float, cancelled: Callable[[], bool]) -> None:
    """Build the venv of the packages (the caller holds its lock), then remove the venvs no
    longer kept; a failure another build recorded after ``asked`` is raised again as it is."""
    key, failed = install.key, f"{install.key}.failed"
    with contextlib.suppress(OSError):
        if os.stat(failed, dir_fd=folder, follow_symlinks=False).st_mtime >= asked:
            raise PackagesError(untrusted.read_own(folder, failed, 1 << 16).decode())
    named = ", ".join(sorted(set(install.packages)))
    print(f"installing the environment's packages ({named}) into {install.directory}", flush=True)
    started = time.monotonic()
    builds.remove_tree(install.directory)
    os.mkdir(key, 0o700, dir_fd=folder)
    if install.uid is not None:
        os.chown(key, install.uid, install.gid or -1, dir_fd=folder)
    cache = _cache(install, folder)
    env = (
        builds.build_env(install.directory) | dict(install.pip_env) | {"PIP_CACHE_DIR": str(cache)}
    )
    del env["PIP_NO_CACHE_DIR"]  # the cache is what makes the next build of them fast
    argv = [sys.executable, __file__, "packages", str(install.directory), *install.packages]
    builder = builds.Builder(
        env=env,
        uid=install.uid,
        gid=install.gid,
        memory_bytes=install.memory_bytes,
        pids_max=install.pids_max,
        keep=(str(install.store), *builds.index_folders(install.pip_env)),
        disk=install.disk,
        fenced=install.fenced,
    )
    network = builds.index_network(install.pip_env)
    spec = builder.walled(argv, install.directory, install.timeout_s, network, (cache,))
    ended, tail = builds.run_capped(spec, cancelled=cancelled)
    if ended.returncode != 0:  # nothing of a failed build is of use: what it wrote goes
        builds.remove_tree(install.directory)
        if ended.over_disk:  # which of its cache's files it wrote, nothing says
            builds.empty(cache)
    if cancelled():
        raise InterruptedError("stopped on SIGTERM before it started")
    if ended.returncode != 0:
        if ended.stopped == wall.STOPPED_TIMEOUT:
            why = f"took longer than {install.timeout_s:g} s (SIMRUN_PACKAGES_TIMEOUT_S)"
        elif ended.oom_kills:
            why = (
                f"was killed for memory: over its budget of {install.memory_bytes / 2**30:g} GiB "
                "(SIMRUN_BUILD_MEMORY_GB)"
            )
        elif ended.returncode is None:
            why = f"failed: {ended.stopped}"
        else:
            why = f"failed: pip exited {ended.returncode}"
        message = f"installing the environment's packages ({named}) {why}:\n" + "\n".join(tail)
        untrusted.write_atomic_at(folder, failed, message)
        raise PackagesError(message)
    seconds = time.monotonic() - started
    with contextlib.suppress(FileNotFoundError):
        os.unlink(failed, dir_fd=folder)
    mark = {
        "packages": sorted(set(install.packages)),
        "seconds": round(seconds, 3),
        "builder": install.uid,
    }
    untrusted.write_atomic_at(folder, _mark(key), json.dumps(mark))
    print(f"installed the environment's packages in {seconds:.1f} s", flush=True)
    builds.bound_cache(cache, install.cache_gb)
    _forget(install, folder)


def _cache(install: Install, folder: int) -> Path:
    """The wheel cache of the install's builder (its own folder), made if missing."""
    name = "service" if install.uid is None else str(install.uid)
    caches = untrusted.service_dir(folder, [CACHE])
    try:
        os.fchmod(caches, untrusted.SERVICE_DIR_MODE | 0o001)
        try:
            os.mkdir(name, 0o700, dir_fd=caches)
        except FileExistsError:
            pass
        else:  # made by the service just now: handed to its builder
            if install.uid is not None:
                os.chown(name, install.uid, install.gid or -1, dir_fd=caches)
    finally:
        os.close(caches)
    return install.store / ENVIRONMENTS / CACHE / name


def _builder(folder: int, key: str) -> int | None:
    """Who built a venv of packages, as its mark says (None: the service's user)."""
    try:
        builder = json.loads(untrusted.read_own(folder, _mark(key), 1 << 16)).get("builder")
    except (OSError, ValueError, AttributeError):
        return None
    return builder if isinstance(builder, int) else None


def _forget(install: Install, folder: int) -> None:
    """Remove the venvs of packages of the install's builder (a user's task user) beyond the
    ``kept`` it used last, but those in use (their lock held by a process) and the one just
    built: each user keeps ``kept`` of its own, which no other user's installs evict."""
    used = {}
    for entry in untrusted.entries(folder):
        if entry.name.endswith(".json") and entry.is_file and entry.name != _mark(install.key):
            key = entry.name.removesuffix(".json")
            if _builder(folder, key) != install.uid:
                continue
            with contextlib.suppress(FileNotFoundError):
                used[key] = os.stat(f"{key}.lock", dir_fd=folder, follow_symlinks=False).st_mtime
    for key in sorted(used, key=used.__getitem__, reverse=True)[max(0, install.kept - 1) :]:
        with _open_lock(folder, key) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_mark(key), dir_fd=folder)
            builds.remove_tree(install.store / ENVIRONMENTS / key)


if (
    __name__ == "__main__"
):  # a build as a builder: sources DIR BASE SNAPSHOT... | packages DIR REQ...
    if sys.argv[1] == "packages":
        raise SystemExit(install_packages(Path(sys.argv[2]), sys.argv[3:]))
    base = Path(sys.argv[3]) if sys.argv[3] else None
    _create(Path(sys.argv[2]), [Path(arg) for arg in sys.argv[4:]], base)
