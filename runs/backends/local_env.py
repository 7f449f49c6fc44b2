"""The venv of a run with source snapshots on the local backend.

Created when the first process of the run starts (by its launcher, under a file lock, so the
processes of a run that start together wait for one venv) and removed at the end of the run.
It sees the packages of the service's environment (simrun, the task types, the build backends)
and has the run's snapshots installed editable on top, never into the service's environment.

Only the standard library and the harness: the launcher imports this module.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import site
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path

from harness import untrusted

READY = ".simrun-ready"
"""The marker of a venv whose snapshots are installed."""
SERVICE_PTH = "simrun-service.pth"
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
"""The variables of the service's environment that building sources keeps."""


def python(directory: Path) -> Path:
    """The interpreter of a venv."""
    return directory / "bin" / "python"


def console_scripts(bin_dir: Path) -> None:
    """The commands of simrun (``simrun-worker``, ...) run by the interpreter of the venv."""
    for point in distribution("simrun").entry_points.select(group="console_scripts"):
        module, _, function = point.value.partition(":")
        script = bin_dir / point.name
        script.write_text(
            f"#!{bin_dir / 'python'}\nimport sys\nfrom {module} import {function}\n"
            f"sys.exit({function}())\n"
        )
        script.chmod(0o755)


def _create(directory: Path, snapshots: list[Path]) -> None:
    """A venv on the service's packages, with the snapshots installed editable."""
    from harness.sources import install_editable

    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(directory)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    purelib = subprocess.run(
        [str(python(directory)), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # addsitedir, not a plain path: the .pth files of the service's packages (an editable
    # simrun among them) must be read too.
    lines = [f"import site; site.addsitedir({path!r})" for path in site.getsitepackages()]
    Path(purelib, SERVICE_PTH).write_text("\n".join(lines) + "\n")
    console_scripts(directory / "bin")
    install_editable(
        [str(s) for s in snapshots], python=str(python(directory)), root=directory / "sources"
    )


def ensure(directory: Path, snapshots: list[Path], *, user: Builder | None = None) -> Path:
    """The interpreter of the venv of a run, created with its snapshots on first use.

    Installing sources runs their build code: with ``user`` the venv is made by a process of
    its own as that user, with only that user's environment (``isolated``)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _ready(directory):
            shutil.rmtree(directory, ignore_errors=True)
            if user is None:
                _create(directory, snapshots)
            else:
                isolated(directory, snapshots, user)
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
class Builder:
    """Who makes a venv from sources: a user id (None: the service's) and an environment."""

    env: Mapping[str, str]
    uid: int | None = None
    gid: int | None = None


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


def isolated(directory: Path, snapshots: list[Path], user: Builder) -> None:
    """Make the venv in a child process as ``user``, printing its one line of output; a
    ``CalledProcessError`` whose ``output`` is the tail of pip's output when it fails."""
    directory.mkdir(parents=True)
    if user.uid is not None:
        os.chown(directory, user.uid, user.gid if user.gid is not None else -1)
    done = subprocess.run(
        [sys.executable, __file__, str(directory), *map(str, snapshots)],
        env=dict(user.env),
        cwd=directory,
        user=user.uid,
        group=user.gid,
        extra_groups=[] if user.uid is not None else None,
        capture_output=True,
        text=True,
        check=False,
    )
    said = done.stdout.strip()
    if done.returncode != 0:
        raise subprocess.CalledProcessError(
            done.returncode, done.args, output="\n".join([said, done.stderr.strip()]).strip()
        )
    if said:
        print(said, flush=True)


def remove(directory: Path) -> None:
    """Remove the venv of a run (at its end) and its lock."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.with_name(directory.name + ".lock").unlink(missing_ok=True)


if __name__ == "__main__":  # ``isolated``: make the venv DIR with the snapshots SNAPSHOT...
    _create(Path(sys.argv[1]), [Path(arg) for arg in sys.argv[2:]])
