"""The processes of builds of venvs: pip run as its builder within a time limit (with what of
the service's environment tells it where packages are), its output capped into the log of the
process it prepares, the end of a build's output, and the trees builders leave measured and
removed (``env`` builds the venvs of environments and of sources with it).

Only the standard library: the launcher imports it from its directory, through ``env``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

PIP_ENV = (
    *("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"),
    *("PIP_TRUSTED_HOST", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES", "PIP_CONSTRAINT"),
    *("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE"),
)
"""The variables of the service's environment an install of packages keeps: where pip finds
them, as the service's own pip would (the site's /etc/pip.conf applies too)."""
OUTPUT_KEPT = 4 << 20
"""The most of a bounded child's output that is read back (the end of it)."""


PIP_OUTPUT_CAP = 256 << 10
"""The most of pip's output an install writes into the log of the process it prepares."""
PIP_TAIL_LINES = 20
"""The lines of pip's output a failed install names."""
POLL_S = 0.2
"""Seconds between two looks at a lock another build holds, or at pip's output."""


def run_capped(
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    uid: int | None,
    gid: int | None,
    timeout_s: float,
    cancelled: Callable[[], bool],
) -> tuple[int | None, list[str]]:
    """Run a build as its builder (``uid``, ``gid``; None: the service's), its output into
    this process's (at most ``PIP_OUTPUT_CAP``), killed past ``timeout_s`` or once cancelled;
    its exit code (None when killed) and the last lines of its output."""
    child = subprocess.Popen(
        argv,
        env=dict(env),
        cwd=cwd,
        user=uid,
        group=gid,
        extra_groups=[] if uid is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert child.stdout is not None
    deadline = time.monotonic() + timeout_s
    tail: deque[str] = deque(maxlen=PIP_TAIL_LINES)
    written, pending, killed = 0, b"", False
    with child.stdout as output:
        # Until the end of its output, or of the child once it was killed (a process it
        # started in a session of its own may hold the pipe).
        while not (killed and child.poll() is not None):
            if not killed and (time.monotonic() > deadline or cancelled()):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                killed = True
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
    code = child.wait()
    if pending.strip():
        tail.append(pending.decode(errors="replace"))
    return (None if killed else code), list(tail)


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
