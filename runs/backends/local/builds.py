"""The processes of builds of venvs: pip run as its builder within a time limit (with what of
the service's environment tells it where packages are), its output capped into the log of the
process it prepares, the end of a build's output, and the trees builders leave measured and
removed (``env`` builds the venvs of environments and of sources with it).

Only the standard library: the launcher imports it from its directory, through ``env``.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

if __package__:  # imported as a module of the service
    from runs.backends.local import wall
else:  # imported by its bare name: by the launcher, from this directory
    import wall  # type: ignore[no-redef]

OUTPUT_KEPT = 4 << 20
"""The most of a bounded child's output that is read back (the end of it)."""


PIP_OUTPUT_CAP = 256 << 10
"""The most of pip's output an install writes into the log of the process it prepares."""
PIP_TAIL_LINES = 20
"""The lines of pip's output a failed install names."""
POLL_S = 0.2
"""Seconds between two looks at a lock another build holds, or at pip's output."""


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
        for name in os.listdir(cache):
            remove_tree(cache / name)


def end_of(file: IO[bytes]) -> str:
    """The last ``OUTPUT_KEPT`` bytes of a file, as text."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - OUTPUT_KEPT))
    return file.read().decode(errors="replace")
