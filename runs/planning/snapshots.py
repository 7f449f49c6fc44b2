"""Source snapshots: a tar.gz of a source tree, kept once under its sha256 in the store.

A snapshot is extracted into ``<store>/snapshots/<digest>/`` where the pods install it. An
archive is untrusted input: every member must be a regular file, a directory or a link that
stays inside the tree, named by a relative path without ``..``, and the archive is capped in
size and file count, so an upload can neither write outside its directory nor fill the store.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Max, Sum

from harness import untrusted
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

    The same archive is stored once, however many users upload it. Its extracted bytes count
    against the owner's budget (``SIMRUN_SNAPSHOT_USER_BYTES``) and everyone's
    (``SIMRUN_SNAPSHOT_TOTAL_BYTES``), checked while it is extracted: a bomb stops at the first
    byte past what is left. Uploads are checked and extracted one at a time (a file lock), so
    two cannot both spend what is left.
    """
    incoming = store.root() / "snapshots" / ".incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=incoming, suffix=".tar.gz") as copy:
        digest, size = _copy_hashing(archive, copy)
        with open(incoming.parent / ".budget.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            known = Snapshot.objects.filter(owner=owner, digest=digest).first()
            if known is not None:
                return known, False
            target = store.snapshot_dir(digest)
            if target.is_dir():
                tree = _kept_bytes(digest)
                _check_owner_budget(owner, tree)
            else:
                copy.seek(0)
                tree = _extract_once(copy, target, limit_for(owner))
            return Snapshot.objects.get_or_create(
                owner=owner,
                digest=digest,
                defaults={"name": name[:200], "size_bytes": size, "tree_bytes": tree},
            )


@dataclass(frozen=True)
class Limit:
    """The most bytes an extraction may write, and the sentence that says why."""

    bytes: int
    why: str


def limit_for(owner: User) -> Limit:
    """What a new tree of ``owner`` may hold: the least of the tree cap and what is left of
    the owner's budget and of everyone's."""
    mine = settings.SIMRUN_SNAPSHOT_USER_BYTES - _owner_bytes(owner)
    everyone = settings.SIMRUN_SNAPSHOT_TOTAL_BYTES - _total_bytes()
    return min(
        Limit(MAX_TREE_BYTES, f"the tree is larger than {MAX_TREE_BYTES // 2**20} MiB"),
        Limit(max(0, mine), _over_owner_budget()),
        Limit(
            max(0, everyone),
            "the snapshots of all users would take more than the "
            f"{_mib(settings.SIMRUN_SNAPSHOT_TOTAL_BYTES)} of extracted files this service "
            "keeps (SIMRUN_SNAPSHOT_TOTAL_BYTES): ask an operator",
        ),
        key=lambda limit: limit.bytes,
    )


def _over_owner_budget() -> str:
    return (
        "your snapshots would take more than the "
        f"{_mib(settings.SIMRUN_SNAPSHOT_USER_BYTES)} of extracted files a user may keep "
        "(SIMRUN_SNAPSHOT_USER_BYTES)"
    )


def _check_owner_budget(owner: User, tree: int) -> None:
    """Refuse a tree the store has already if it would take the owner past their budget."""
    if _owner_bytes(owner) + tree > settings.SIMRUN_SNAPSHOT_USER_BYTES:
        raise SnapshotError(_over_owner_budget())


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB"


def _owner_bytes(owner: User) -> int:
    """The extracted bytes of the snapshots of ``owner``."""
    return Snapshot.objects.filter(owner=owner).aggregate(n=Sum("tree_bytes"))["n"] or 0


def _total_bytes() -> int:
    """The extracted bytes of every tree the store keeps (each digest once)."""
    per_tree = Snapshot.objects.values("digest").annotate(n=Max("tree_bytes"))
    return sum(row["n"] or 0 for row in per_tree)


def _kept_bytes(digest: str) -> int:
    """The extracted bytes of a tree the store has already, as its rows recorded them."""
    rows = Snapshot.objects.filter(digest=digest)
    return rows.aggregate(n=Max("tree_bytes"))["n"] or 0


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


def _extract_once(archive: IO[bytes], target: Path, limit: Limit) -> int:
    """Extract into a temporary directory beside ``target``, then rename it into place; the
    bytes written, at most ``limit``.

    The tree is the service's, readable by every task user (``mkdtemp`` made its root
    ``0700``): a snapshot is installed by the task users of every owner who uploaded it.
    """
    work = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    try:
        written = extract(archive, work, limit)
        os.chmod(work, TREE_DIR_MODE)
        try:
            os.rename(work, target)
        except OSError:
            # Another upload of the same archive won the race: its tree is the same.
            if not target.is_dir():
                raise
    finally:
        # An archive's tree may be nested deeper than shutil's recursion goes (links make it
        # deeper than its names): removed without recursion, following no link.
        untrusted.remove_tree(work.parent, [work.name])
    return written


TREE_DIR_MODE = 0o755
"""The folders of an extracted tree: readable and passable by every task user."""


def extract(archive: IO[bytes], destination: Path, limit: Limit | None = None) -> int:
    """Extract a tar.gz into ``destination`` as it is read, each member checked before it is
    written and its bytes counted as they are (one pass over the stream: nothing is
    decompressed twice); the bytes written, refused at the first past ``limit``."""
    limit = limit or Limit(MAX_TREE_BYTES, f"the tree is larger than {MAX_TREE_BYTES // 2**20} MiB")
    try:
        with tarfile.open(fileobj=archive, mode="r|gz") as tar:
            extracted = Extracted(destination.resolve(), limit)
            for member in tar:
                extracted.add(tar, member)
            return extracted.written
    except SnapshotError:
        raise
    except OSError as error:
        if error.errno in {errno.ENOSPC, errno.EDQUOT, errno.EROFS}:
            raise  # the disk's fault, not the archive's (runs.web.middleware answers 507)
        raise SnapshotError(f"not a readable tar.gz archive: {error}") from None
    except (tarfile.TarError, EOFError, ValueError, zlib.error) as error:
        raise SnapshotError(f"not a readable tar.gz archive: {error}") from None


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse absolute names, ``..``, links leading out, devices and FIFOs."""
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


@dataclass
class Extracted:
    """A tree being extracted into ``root`` (a fresh folder of the service's): its members
    so far and the bytes written, each checked against the caps before it is written."""

    root: Path
    limit: Limit
    members: int = 0
    written: int = 0

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """Check one member and extract it as ``filter="data"`` would, by hand (Debian's
        Python 3.11.2 has no filters).

        Where it lands and where a link points are checked with the links already extracted
        resolved (a link through a link can lead out where its name does not). Folders are
        ``0755`` and files ``0644`` (``0755`` if executable) whatever the archive says:
        setuid, setgid and sticky bits and group and other write are dropped, and every task
        user may read the tree. Owners are not kept.
        """
        self.members += 1
        if self.members > MAX_FILES:
            raise SnapshotError(f"the archive has more than {MAX_FILES} entries")
        check_member(member)
        if self.written + member.size > self.limit.bytes:
            raise SnapshotError(self.limit.why)
        root = self.root
        path = os.path.join(root, member.name)
        parent = _inside(root, os.path.dirname(path))
        _folders(root, parent)
        path = os.path.join(parent, os.path.basename(path))
        if os.path.lexists(path) and not (member.isdir() and os.path.isdir(path)):
            raise SnapshotError(f"{member.name!r} is in the archive twice")
        if member.isdir():
            _inside(root, path)
            _folders(root, path)
        elif member.issym():
            _inside(root, os.path.join(parent, member.linkname))
            os.symlink(member.linkname, path)
        elif member.islnk():
            os.link(_inside(root, os.path.join(root, member.linkname)), path)
        else:
            self._write(tar, member, path)

    def _write(self, tar: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> None:
        """Copy a regular file, counting its bytes as they are written."""
        source = tar.extractfile(member)
        if source is None:
            raise SnapshotError(f"{member.name!r} cannot be read")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with source, open(os.open(path, flags, 0o600), "wb") as target:
            while chunk := source.read(CHUNK):
                self.written += len(chunk)
                if self.written > self.limit.bytes:
                    raise SnapshotError(self.limit.why)
                target.write(chunk)
            os.fchmod(target.fileno(), 0o755 if member.mode & 0o100 else 0o644)


def _folders(root: Path, path: str) -> None:
    """Make the folders down to ``path`` (inside ``root``), each ``TREE_DIR_MODE``."""
    missing = []
    while path != str(root) and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        os.mkdir(folder)
        os.chmod(folder, TREE_DIR_MODE)
