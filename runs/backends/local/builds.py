"""The processes of builds of venvs: who runs one (``Builder``: a user, an environment, the
budget of its wall), pip run as its builder within a time limit (with what of the service's
environment tells it where packages are), its output capped into the log of the process it
prepares, the end of a build's output, and the trees builders leave measured and removed
(``env`` builds the venvs of environments and of sources with it).

Only the standard library and its siblings ``wall``, ``wall_disk`` and ``launch_file``: the
launcher imports it from its directory, through ``env``.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

if __package__:  # imported as a module of the service
    from runs.backends.local import wall, wall_disk
    from runs.backends.local.launch_file import Ids
else:  # imported by its bare name: by the launcher, from this directory
    import wall  # type: ignore[no-redef]
    import wall_disk  # type: ignore[no-redef]
    from launch_file import Ids  # type: ignore[no-redef]

OUTPUT_KEPT = 4 << 20
"""The most of a bounded child's output that is read back (the end of it)."""


PIP_OUTPUT_CAP = 256 << 10
"""The most of pip's output an install writes into the log of the process it prepares."""
PIP_TAIL_LINES = 20
"""The lines of pip's output a failed install names."""
POLL_S = 0.2
"""Seconds between two looks at a lock another build holds, or at pip's output."""


KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
"""The variables of the service's environment that building sources keeps."""


BUILD_UMASK = 0o022
"""What a builder makes (a venv) its user alone writes."""


@dataclass(frozen=True)
class Builder:
    """Who runs the code of a user's sources outside a task (a build, a learning): a user id
    (None: the service's), an environment, and the budget of its wall (``wall.Limits``):
    memory and processes, and what it may write in its folders (``wall_disk``), which are the
    only ones of ``fenced`` it may write; ``keep``, folders below ``/tmp`` it must see (the
    store's)."""

    env: Mapping[str, str]
    uid: int | None = None
    gid: int | None = None
    memory_bytes: int = int(wall.BUILD_MEMORY_GB * 2**30)
    pids_max: int = wall.BUILD_PIDS_MAX
    keep: tuple[str, ...] = ()
    disk: wall_disk.Disk = field(default_factory=wall_disk.Disk)
    fenced: tuple[str, ...] = ()
    """The folders of users' things, read-only to it but for the folders it writes
    (``shm.fence``)."""

    def walled(
        self,
        argv: list[str],
        cwd: Path,
        timeout_s: float | None,
        network: str = "own",
        counted: tuple[Path, ...] = (),
    ) -> wall.Spec:
        """What the wall runs for this builder: ``argv`` in ``cwd`` within its limits; the
        folders ``argv`` names and the service's Python stay visible. What it writes in
        ``cwd``, its ``HOME``, its ``TMPDIR`` and ``counted`` counts against its budget of
        disk."""
        user = None
        if self.uid is not None:
            gid = self.gid if self.gid is not None else self.uid
            user = Ids(uid=self.uid, gid=gid, umask=BUILD_UMASK)
        named = [Path(a) for a in argv if a.startswith("/")]
        python = Path(sys.executable)
        keep = [*self.keep, str(cwd), sys.prefix, str(python.parent.parent)]
        keep.append(str(python.resolve().parent.parent))
        keep += [str(p if p.is_dir() else p.parent) for p in named]
        homes = [Path(self.env[k]) for k in ("HOME", "TMPDIR") if k in self.env]
        written = wall_disk.outermost([cwd, *counted, *homes])
        return wall.Spec(
            argv=argv,
            env=dict(self.env),
            cwd=str(cwd),
            user=user,
            limits=wall.Limits(self.memory_bytes, self.pids_max, timeout_s, network),
            keep=keep + written,
            disk=replace(self.disk, counted=written),
            fenced=list(self.fenced),
        )


def build_env(home: Path) -> dict[str, str]:
    """The environment code of a user's sources runs with outside a task: enough to run
    Python and pip, none of the service's configuration."""
    env = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    return env | {
        "HOME": str(home),
        "TMPDIR": str(home),
        "PIP_NO_CACHE_DIR": "1",
        "PYTHONUNBUFFERED": "1",
    }


def _places(pip_env: Mapping[str, str]) -> tuple[list[str], bool]:
    """Where pip's settings say packages are, and whether they name only folders of this
    machine (``PIP_NO_INDEX`` with ``PIP_FIND_LINKS`` folders, or ``file:`` indexes)."""
    places = pip_env.get("PIP_FIND_LINKS", "").split()
    local = pip_env.get("PIP_NO_INDEX", "").lower() in {"1", "true", "yes", "on"}
    if not local:
        indexes = [pip_env.get("PIP_INDEX_URL", ""), pip_env.get("PIP_EXTRA_INDEX_URL", "")]
        places += " ".join(indexes).split()
        local = pip_env.get("PIP_INDEX_URL", "").startswith("file:")
    return places, local and all("://" not in p or p.startswith("file:") for p in places)


def index_network(pip_env: Mapping[str, str]) -> str:
    """The network a build needs (``wall.Limits``): ``own`` (a loopback of its own) where
    pip's settings name only folders of this machine; ``host`` (the machine's) where the
    service reaches the network through a proxy of its own, which the build must use too;
    else ``proxy``: a loopback of its own and a way to other machines, never this one."""
    if _places(pip_env)[1]:
        return "own"
    if any(name.lower() in {"http_proxy", "https_proxy"} for name in pip_env):
        return "host"
    return "proxy"


def index_folders(pip_env: Mapping[str, str]) -> list[str]:
    """The folders of this machine pip's settings name: a build behind its wall sees them."""
    places = _places(pip_env)[0]
    return [
        p.removeprefix("file://").removeprefix("file:")
        for p in places
        if "://" not in p or p.startswith("file:")
    ]


def run_capped(spec: wall.Spec, *, cancelled: Callable[[], bool]) -> tuple[wall.Ended, list[str]]:
    """Run a build behind its wall (``wall``), its output into this process's (at most
    ``PIP_OUTPUT_CAP``), stopped past its time limit or once cancelled; how it ended and the
    last lines of its output."""
    read, write = os.pipe()
    try:
        walled = wall.start(spec, stdin=subprocess.DEVNULL, stdout=write, stderr=write)
    finally:
        os.close(write)
    tail: deque[str] = deque(maxlen=PIP_TAIL_LINES)
    written, pending, asked = 0, b"", False
    with os.fdopen(read, "rb") as output:
        # Until the end of its output: the wall kills whatever holds the pipe at its end.
        while True:
            if not asked and cancelled():
                walled.stop()
                asked = True
            if not select.select([output], [], [], POLL_S)[0]:
                continue
            chunk = os.read(output.fileno(), 65536)
            if not chunk:
                break
            if written < PIP_OUTPUT_CAP <= written + len(chunk):
                sys.stdout.write(chunk[: PIP_OUTPUT_CAP - written].decode(errors="replace"))
                print(f"\n(the log keeps the first {PIP_OUTPUT_CAP >> 10} KiB of pip's output)")
            elif written < PIP_OUTPUT_CAP:
                sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
            written += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            tail.extend(line.decode(errors="replace") for line in lines if line.strip())
            pending = pending[-4096:]
    ended = walled.wait()
    if pending.strip():
        tail.append(pending.decode(errors="replace"))
    return ended, list(tail)


def remove_tree(path: Path) -> None:
    """Remove a tree a builder made, however deep, following no link in it."""
    if path.exists() or path.is_symlink():
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)


def tree_bytes(path: Path) -> int:
    """The bytes of the files of a tree, walked without following links."""
    done = subprocess.run(["du", "-sb", "--", str(path)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) if done.returncode == 0 and done.stdout else 0


def bound_cache(cache: Path, cache_gb: float) -> None:
    """Empty a builder's wheel cache when an install left it over ``cache_gb``."""
    if tree_bytes(cache) > cache_gb * 2**30:
        print(f"the wheel cache is over {cache_gb:g} GiB (SIMRUN_PACKAGES_CACHE_GB): emptied")
        empty(cache)


def empty(folder: Path) -> None:
    """Remove what is in a folder a builder wrote (a wheel cache), keeping the folder."""
    for name in os.listdir(folder):
        remove_tree(folder / name)


def end_of(file: IO[bytes]) -> str:
    """The last ``OUTPUT_KEPT`` bytes of a file, as text."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - OUTPUT_KEPT))
    return file.read().decode(errors="replace")
