"""The programs and files a command names, as they are on the service's machine (docs/resume.md).

A task's key covers what decides its outputs; for a command, that is not only its arguments
but the program they run and the files they name: an edited ``crashy.py`` or a recompiled
binary under the same path computes other results. So the content of each is read when the
run is submitted and becomes part of the task's key (``runs.planning.keys``):

- the program, ``command[0]``: by its path when it holds a ``/``, else as ``PATH`` finds it
  (``python`` and ``python3`` are the harness's interpreter, which simrun's version and the
  run's environment already key);
- every other argument that is an absolute path, or is one after its first ``=``
  (``--input=/data/x.csv``); one with a placeholder differs per unit and is left out.

What a path holds is told by a ``Named`` digest: ``sha256:…`` of its content; ``stat:…`` (size,
times, inode) of a file larger than ``MAX_HASHED`` (or than what is left of the run's
``MAX_HASHED_PER_RUN``) or that the service may not read; ``folder``;
``absent``; ``not-a-file`` (a FIFO, a device: never opened for reading). A path in the store,
or leading into it by a link, is what a task could have written: it is opened component by
component without following a link (``harness.untrusted``), and one with a link on the way,
one that leads in by a link, or one the service cannot read there is never the same (a
fresh nonce: its task always runs). Every file is opened without waiting (a FIFO never blocks
the service) and read at most ``MAX_HASHED`` bytes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import untrusted
from harness.programs import SETUP, shell_line_commands, shell_line_index
from harness.sweep import SWEEP_TYPE
from runs.backends.base import TaskRecord
from runs.common import store

MAX_HASHED = 256 * 2**20
"""The most bytes of one file read for its digest; a larger file is keyed by its ``stat``."""
MAX_HASHED_PER_RUN = 1 << 30
"""The most bytes read for the digests of one run's files (a submission is a web request):
the files past it are keyed by their ``stat``."""
CHUNK = 2**20
INTERPRETERS = frozenset({"python", "python3"})
"""Programs that are the harness's interpreter: keyed by simrun's version and the environment."""
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass
class Budget:
    """The bytes one submission may still read for its digests."""

    left: int


def command_of(record: TaskRecord) -> list[str]:
    """The command a task runs: a command task's, or that of a command sweep's units."""
    if record.type == SWEEP_TYPE:
        command = record.settings.get("command", [])
        return [str(arg) for arg in command] if isinstance(command, list) else []
    return list(record.command)


def named_paths(command: list[str]) -> list[str]:
    """The paths on the service's machine a command names, program first, each once."""
    return list(dict.fromkeys(os.path.normpath(path) for path in _named(command, None)))


def _named(command: Sequence[str], folder: str | None) -> list[str]:
    """The absolute paths ``command``, run in ``folder`` (None: the task's scratch, not known
    at submission), names: its program, its arguments that are absolute paths (or after an
    ``=``), the ones relative to a known folder that exist there, and what the line of a shell
    (``sh -c LINE``) runs, each of its commands in the folder its ``cd``s lead to."""
    if not command:
        return []
    paths = _program(command[0], folder)
    line = shell_line_index(command)
    for index, arg in enumerate(command[1:], start=1):
        if index == line or _varies(arg):
            continue
        value = arg if arg.startswith("/") else arg.partition("=")[2]
        if value.startswith("/"):
            paths.append(value)
        elif folder and not arg.startswith("-") and os.path.lexists(relative := f"{folder}/{arg}"):
            paths.append(relative)
    if line is not None:
        for inner in shell_line_commands(command[line]):
            if inner.words and inner.words[0] != "cd":
                paths += _named(inner.words, inner.folder)
            paths += [
                read if read.startswith("/") else f"{inner.folder}/{read}"
                for read in inner.reads
                if not _varies(read) and (read.startswith("/") or inner.folder)
            ]
    return paths


def _program(program: str, folder: str | None) -> list[str]:
    """The file a command's first word runs: by its path when it holds a ``/`` (relative to
    ``folder`` when known), else as ``PATH`` finds it; none for the harness's interpreter, a
    shell's builtin, or a name not known at submission."""
    if _varies(program) or program in INTERPRETERS or program in SETUP:
        return []
    if "/" not in program:
        return [found] if (found := shutil.which(program)) else []
    if program.startswith("/"):
        return [program]
    return [f"{folder}/{program}"] if folder else []


def _varies(word: str) -> bool:
    """Whether a word is not known at submission: a placeholder, a variable, a home folder."""
    return "{" in word or "$" in word or word.startswith("~")


def named_files(records: Mapping[str, TaskRecord]) -> dict[str, dict[str, str]]:
    """What every path each task's command names holds, by task id then path; a path named by
    several tasks is read once."""
    read: dict[str, str] = {}
    budget = Budget(MAX_HASHED_PER_RUN)
    files = {}
    for task_id, record in records.items():
        paths = named_paths(command_of(record))
        for path in paths:
            if path not in read:
                read[path] = digest(path, budget)
        files[task_id] = {path: read[path] for path in paths}
    return files


def digest(path: str, budget: Budget | None = None) -> str:
    """What the absolute ``path`` holds, as a ``Named`` digest (the module's docstring); the
    bytes read are taken from ``budget``, a file beyond what is left keyed by its ``stat``."""
    budget = budget if budget is not None else Budget(MAX_HASHED)
    root = os.path.normpath(store.root())
    if _below(path, root):
        return _in_store(root, os.path.relpath(path, root), budget)
    try:
        if _below(os.path.realpath(path), os.path.realpath(root)):
            return f"link-into-store:{secrets.token_hex(16)}"  # a task's: never the same
        fd = os.open(path, OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    except IsADirectoryError:
        return "folder"
    except OSError:
        return _status(path)
    try:
        return _content(fd, budget)
    finally:
        os.close(fd)


def _in_store(root: str, relative: str, budget: Budget) -> str:
    """What a path in the store holds, walked without following a link."""
    try:
        with untrusted.open_file(Path(root), relative) as file:
            return _content(file.fileno(), budget)
    except FileNotFoundError:
        return "absent"
    except untrusted.Refused:
        return "not-a-file"  # a folder, a FIFO, a device
    except OSError as error:
        # A link on the way (ELOOP, or ENOTDIR past one) is not followed, and what it leads
        # to may change unseen: never the same, as a file the service cannot read.
        what = "link" if error.errno in (errno.ELOOP, errno.ENOTDIR) else "unreadable"
        return f"{what}:{secrets.token_hex(16)}"


def _content(fd: int, budget: Budget) -> str:
    """The digest of an open file: its content's, or its ``stat`` when it is larger than
    ``MAX_HASHED`` or what is left of ``budget``; a folder or a FIFO is said, never read."""
    status = os.fstat(fd)
    if stat.S_ISDIR(status.st_mode):
        return "folder"
    if not stat.S_ISREG(status.st_mode):
        return "not-a-file"
    if status.st_size > min(MAX_HASHED, budget.left):
        return _identity(status)
    os.set_blocking(fd, True)
    hashed = hashlib.sha256()
    left = status.st_size
    while left > 0 and (chunk := os.read(fd, min(CHUNK, left))):
        hashed.update(chunk)
        left -= len(chunk)
    budget.left -= status.st_size
    if os.read(fd, 1):  # it grew while read: its content is not what was hashed
        return _identity(os.fstat(fd))
    return f"sha256:{hashed.hexdigest()}"


def _status(path: str) -> str:
    """The digest of a file the service may not read: its ``stat``, which any change moves."""
    try:
        return _identity(os.stat(path))
    except OSError:
        return f"unreadable:{secrets.token_hex(16)}"


def _identity(status: os.stat_result) -> str:
    return (
        f"stat:{status.st_size}:{status.st_mtime_ns}:{status.st_ctime_ns}:"
        f"{status.st_dev}:{status.st_ino}"
    )


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def changed(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The paths whose content differs between two tasks' ``named_files`` (named by both)."""
    return [path for path in after if path in before and before[path] != after[path]]


def paths_of(files: Iterable[str]) -> str:
    """Paths for a message: the first three, and how many more."""
    names = list(files)
    shown = ", ".join(names[:3])
    return shown if len(names) <= 3 else f"{shown} and {len(names) - 3} more"
