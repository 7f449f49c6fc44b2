"""Source snapshots: a tar.gz of a source tree, kept once under its sha256 in the store.

A snapshot is extracted into ``<store>/snapshots/<digest>/`` where the pods install it. An
archive is untrusted input: every member must be a regular file, a directory or a link that
stays inside the tree, named by a relative path without ``..``, and the archive is capped in
size and file count, so an upload can neither write outside its directory nor fill the store.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

from django.contrib.auth.models import User

from runs.common import store
from runs.models import Snapshot

if TYPE_CHECKING:
    from _typeshed import SupportsRead

MAX_ARCHIVE_BYTES = 100 * 1024 * 1024
MAX_TREE_BYTES = 500 * 1024 * 1024
MAX_FILES = 20_000
MAX_NAME_LENGTH = 1024
CHUNK = 1024 * 1024


class SnapshotError(Exception):
    """An archive that cannot be a snapshot; the message says why."""


def save_snapshot(
    *, owner: User, archive: SupportsRead[bytes], name: str = ""
) -> tuple[Snapshot, bool]:
    """Keep an uploaded tar.gz as a snapshot of ``owner``: the row and whether it is new.

    The same archive is stored once, however many users upload it.
    """
    incoming = store.root() / "snapshots" / ".incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=incoming, suffix=".tar.gz") as copy:
        digest, size = _copy_hashing(archive, copy)
        target = store.snapshot_dir(digest)
        if not target.is_dir():
            copy.seek(0)
            _extract_once(copy, target)
    return Snapshot.objects.get_or_create(
        owner=owner, digest=digest, defaults={"name": name[:200], "size_bytes": size}
    )


def _copy_hashing(source: SupportsRead[bytes], target: IO[bytes]) -> tuple[str, int]:
    """Copy an upload, refusing it past ``MAX_ARCHIVE_BYTES``; its sha256 and size."""
    digest = hashlib.sha256()
    size = 0
    while chunk := source.read(CHUNK):
        size += len(chunk)
        if size > MAX_ARCHIVE_BYTES:
            raise SnapshotError(f"the archive is larger than {MAX_ARCHIVE_BYTES // 2**20} MiB")
        digest.update(chunk)
        target.write(chunk)
    target.flush()
    if size == 0:
        raise SnapshotError("the archive is empty: send a tar.gz of your source tree")
    return digest.hexdigest(), size


def _extract_once(archive: IO[bytes], target: Path) -> None:
    """Extract into a temporary directory beside ``target``, then rename it into place."""
    work = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    try:
        extract(archive, work)
        try:
            os.rename(work, target)
        except OSError:
            # Another upload of the same archive won the race: its tree is the same.
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


HAS_DATA_FILTER = hasattr(tarfile, "data_filter")
"""Whether tarfile has extraction filters (Python 3.11.4 on; Debian's 3.11.2 has none)."""
FILTER_ERRORS: tuple[type[Exception], ...] = (tarfile.FilterError,) if HAS_DATA_FILTER else ()


def extract(archive: IO[bytes], destination: Path) -> None:
    """Check every member of a tar.gz, then extract it into ``destination``."""
    try:
        with tarfile.open(fileobj=archive, mode="r:gz") as tar:
            members = tar.getmembers()
            check_members(members)
            if HAS_DATA_FILTER:
                tar.extractall(destination, members=members, filter="data")
            else:
                for member in members:
                    _extract_member(tar, member, destination.resolve())
    except SnapshotError:
        raise
    except FILTER_ERRORS as error:
        raise SnapshotError(f"refused: {error}") from None
    except OSError as error:
        if error.errno in {errno.ENOSPC, errno.EDQUOT, errno.EROFS}:
            raise  # the disk's fault, not the archive's (runs.web.middleware answers 507)
        raise SnapshotError(f"not a readable tar.gz archive: {error}") from None
    except (tarfile.TarError, EOFError, ValueError) as error:
        raise SnapshotError(f"not a readable tar.gz archive: {error}") from None


def check_members(members: list[tarfile.TarInfo]) -> None:
    """Refuse absolute names, ``..``, links leading out, devices, and trees past the caps."""
    if len(members) > MAX_FILES:
        raise SnapshotError(f"the archive has more than {MAX_FILES} entries")
    total = 0
    for member in members:
        name = member.name
        path = PurePosixPath(name)
        if len(name) > MAX_NAME_LENGTH or "\x00" in name:
            raise SnapshotError(f"{name[:80]!r}: the name is too long or malformed")
        if path.is_absolute() or ".." in path.parts:
            raise SnapshotError(f"{name!r}: absolute paths and '..' are not allowed")
        if member.issym() or member.islnk():
            _check_link(member)
        elif not (member.isfile() or member.isdir()):
            raise SnapshotError(f"{name!r}: only files, directories and links are allowed")
        total += member.size
        if total > MAX_TREE_BYTES:
            raise SnapshotError(f"the tree is larger than {MAX_TREE_BYTES // 2**20} MiB")


def _check_link(member: tarfile.TarInfo) -> None:
    """A link must point to a relative path that stays inside the tree."""
    target = PurePosixPath(member.linkname)
    if target.is_absolute():
        raise SnapshotError(f"{member.name!r}: a link to an absolute path leads out of the tree")
    base = PurePosixPath(member.name).parent if member.issym() else PurePosixPath()
    depth = 0
    for part in (*base.parts, *target.parts):
        if part == "..":
            depth -= 1
        elif part not in {"", "."}:
            depth += 1
        if depth < 0:
            raise SnapshotError(f"{member.name!r}: the link leads out of the tree")


def _inside(root: Path, path: str) -> str:
    """``path`` with its links resolved, which must stay inside ``root``."""
    real = os.path.realpath(path)
    if real != str(root) and not real.startswith(str(root) + os.sep):
        raise SnapshotError(f"{os.path.relpath(path, root)!r} leads out of the tree")
    return real


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path) -> None:
    """Extract one checked member as ``filter="data"`` would, without tarfile's filters.

    Where it lands and where a link points are checked with the links already extracted
    resolved (a link through a link can lead out where its name does not); modes lose their
    setuid, setgid and sticky bits and group and other write; owners are not kept.
    """
    path = os.path.join(root, member.name)
    parent = _inside(root, os.path.dirname(path))
    os.makedirs(parent, mode=0o755, exist_ok=True)
    path = os.path.join(parent, os.path.basename(path))
    if os.path.lexists(path) and not (member.isdir() and os.path.isdir(path)):
        raise SnapshotError(f"{member.name!r} is in the archive twice")
    if member.isdir():
        _inside(root, path)
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif member.issym():
        _inside(root, os.path.join(parent, member.linkname))
        os.symlink(member.linkname, path)
    elif member.islnk():
        os.link(_inside(root, os.path.join(root, member.linkname)), path)
    elif member.isfile():
        source = tar.extractfile(member)
        if source is None:
            raise SnapshotError(f"{member.name!r} cannot be read")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with source, open(os.open(path, flags, 0o600), "wb") as target:
            shutil.copyfileobj(source, target, CHUNK)
            mode = member.mode & 0o755 | 0o600
            os.fchmod(target.fileno(), mode if mode & 0o100 else mode & ~0o111)
    else:  # check_members lets nothing else through
        raise SnapshotError(f"{member.name!r}: only files, directories and links are allowed")
