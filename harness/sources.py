"""Source snapshots installed editable in the pod, and inputs staged into scratch.

A run may carry snapshots of its user's source trees (``SIMRUN_EDITABLE``): the harness
installs them editable without dependencies (the image has those and the build backends),
then restarts in a fresh interpreter, which imports the installed sources.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from harness import untrusted
from harness.config import EDITABLE_ENV
from harness.errors import STORAGE_ERRNOS

SOURCES_DIR = "simrun-sources"
"""The directory of the shadow trees below the temporary directory."""
PIP_LOG = "pip.log"
"""The file of pip's output below the root of the shadow trees."""
PIP_TAIL_LINES = 20
"""The lines of pip's output a failed install shows in the log."""
SOURCES_INSTALLED = "SIMRUN_SOURCES_INSTALLED"
"""Set before the restart, so the new interpreter does not install again."""


def shadow_tree(source: Path, target: Path) -> Path:
    """A writable tree of a read-only one: its directories, links to its files.

    A build backend may write into the tree it builds (metadata, a build directory); it
    writes into the shadow's directories, never into the source. A link of the source (to a
    file or a directory) is the same link in the shadow. ``target`` is replaced if it exists.
    """
    source = source.absolute()
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for directory, dirs, files in os.walk(source):
        relative = Path(directory).relative_to(source)
        for name in list(dirs):
            path = Path(directory) / name
            if path.is_symlink():
                os.symlink(os.readlink(path), target / relative / name)
                dirs.remove(name)  # os.walk does not descend into it anyway; be explicit
            else:
                (target / relative / name).mkdir()
        for name in files:
            path = Path(directory) / name
            link = os.readlink(path) if path.is_symlink() else path
            os.symlink(link, target / relative / name)
    return target


class InstallFailed(subprocess.CalledProcessError):
    """pip could not install the sources: said as pip's reason, never as the command line
    (``output`` is the tail of pip's output)."""

    def __str__(self) -> str:
        return f"pip install -e exited {self.returncode}: {pip_reason(self.output)}"


def pip_reason(output: str | bytes | None) -> str:
    """pip's reason for a failure, from its output: the last lines of a build's own output
    (what pip frames with ``[end of output]``), else pip's ``ERROR:`` lines, else its last."""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output or ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ends = [i for i, line in enumerate(lines) if line == "[end of output]"]
    if ends and ends[-1] > 0:
        return " ".join(lines[max(0, ends[-1] - 2) : ends[-1]])
    errors = [line for line in lines if line.startswith("ERROR:")]
    return " ".join(errors or lines[-1:]) or "it printed nothing"


def install_editable(
    snapshots: list[str], python: str = sys.executable, root: Path | None = None
) -> None:
    """Install snapshots of sources as editable packages, without dependencies.

    Without build isolation and without an index: the image has the dependencies and the
    build backends. Each snapshot (mounted read-only) is installed from a writable shadow tree
    below ``root`` (``SOURCES_DIR`` in the temporary directory by default). Nothing is done
    without a snapshot. pip's output goes to ``root/PIP_LOG``; the log gets one line, or the
    tail of that output when pip fails: ``InstallFailed`` (a ``CalledProcessError``, said as
    pip's reason) whose ``output`` is that tail.
    """
    if not snapshots:
        return
    root = root or Path(tempfile.gettempdir()) / SOURCES_DIR
    command = [python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps"]
    command.append("--disable-pip-version-check")
    for snapshot in snapshots:
        path = Path(snapshot).absolute()
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        shadow = shadow_tree(path, root / f"{path.name}-{digest}")
        command += ["-e", str(shadow)]
    output = root / PIP_LOG
    with open(output, "wb") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        lines = output.read_text(errors="replace").splitlines()
        tail = "\n".join(lines[-PIP_TAIL_LINES:])
        print(f"pip failed to install the sources (all of its output: {output}):\n{tail}")
        sys.stdout.flush()
        raise InstallFailed(done.returncode, command, output=tail)
    names = ", ".join(Path(s).name[:12] for s in snapshots)
    print(f"installed the sources {names} editable (pip's output: {output})")
    sys.stdout.flush()


def install_sources(env: Mapping[str, str], stop: threading.Event) -> None:
    """Install the snapshots of ``SIMRUN_EDITABLE``, then restart in a fresh interpreter.

    A source may be a package this process imported already (simrun itself, when a run has
    the simrun repository as a source): its install replaces the files the imported modules
    came from, so the command starts again (``restart``) with ``SOURCES_INSTALLED`` set. A
    SIGTERM during the install (``stop``) skips the restart, so the caller exits.
    """
    if not needs_restart(env):
        return
    snapshots = [s.strip() for s in env.get(EDITABLE_ENV, "").split(",") if s.strip()]
    if not snapshots:
        return
    install_editable(snapshots)
    if stop.is_set():
        return
    os.environ[SOURCES_INSTALLED] = "1"
    restart()


def needs_restart(env: Mapping[str, str]) -> bool:
    """Whether this interpreter has snapshots to install and has not restarted after it."""
    return bool(env.get(EDITABLE_ENV, "").strip()) and not env.get(SOURCES_INSTALLED)


def restart() -> None:
    """Replace the process with a new interpreter of the same command line.

    SIGTERM is blocked across the ``exec`` (a blocked signal stays pending through it), so
    one that arrives before the new interpreter handles it is not lost; ``sigterm_stops``
    unblocks it.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


class StagingStorageError(Exception):
    """The disk failed under a copy (full, EIO, ESTALE): raised through ``copytree``, which
    would otherwise fold it into a list of strings without its errno."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.errno = error.errno


def stage(pairs: list[tuple[str, str]], store: Path, scratch: Path) -> None:
    """Copy inputs to the scratch directory.

    ``pairs`` are (source, destination); a relative source is relative to the store, a
    relative destination to the scratch directory. A directory is copied with its tree. The
    source is walked without following any link (``harness.untrusted``): a link in it is copied
    as a link, a FIFO or a device is left out, and a source that is a link, or has one on its
    way from the store, is refused. Raises ``FileNotFoundError`` naming a source that does not
    exist, ``StagingStorageError`` when a disk fails under the copy.
    """
    for source, destination in pairs:
        origin = Path(source) if Path(source).is_absolute() else store / source
        target = Path(destination) if Path(destination).is_absolute() else scratch / destination
        parts: tuple[str, ...]
        if Path(source).is_absolute():
            base, parts = origin.parent, (origin.name,)
        else:
            base, parts = store, untrusted.parts_of(source)
        try:
            folder = untrusted.open_dir(base, parts)
        except FileNotFoundError:
            raise FileNotFoundError(f"input {origin} does not exist") from None
        except NotADirectoryError:
            folder = -1
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise untrusted.Refused(str(origin), "a link, not followed") from None
            raise
        if folder < 0:
            with untrusted.open_file(base, parts) as file:
                target.parent.mkdir(parents=True, exist_ok=True)
                _copy_file(file, target)
            continue
        try:
            _copy_tree(folder, target)
        finally:
            os.close(folder)


def _copy_tree(folder: int, target: Path) -> None:
    """Copy a directory (by descriptor) into ``target``: its folders, regular files and links
    (as links); nothing else, and no link followed."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in untrusted.entries(folder):
        destination = target / entry.name
        if entry.is_dir:
            with untrusted.directory(folder, [entry.name]) as child:
                _copy_tree(child, destination)
        elif entry.is_file:
            with untrusted.open_regular(folder, entry.name) as file:
                _copy_file(file, destination)
        elif stat.S_ISLNK(entry.mode):
            os.symlink(os.readlink(entry.name, dir_fd=folder), destination)


def _copy_file(file: BinaryIO, target: Path) -> None:
    """Copy an open regular file to ``target`` with its mode and times, as ``copy2`` would;
    a disk failing under it is a ``StagingStorageError``."""
    status = os.fstat(file.fileno())
    try:
        with open(target, "wb") as copy:
            shutil.copyfileobj(file, copy)
        os.chmod(target, stat.S_IMODE(status.st_mode))
        os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))
    except OSError as error:
        if error.errno in STORAGE_ERRNOS:
            raise StagingStorageError(error) from error
        raise
