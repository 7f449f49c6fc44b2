"""A ``/dev/shm`` of each task's own on the local backend, counted in its memory and gone with it.

The machine's ``/dev/shm`` is one tmpfs every local user shares, as large as half the memory,
and what a process leaves there outlives it: two runs could leave 800 MiB nobody accounted
for. So a task started by a root launcher gets, in the child before it drops to its user, a
mount namespace of its own (and an IPC namespace: System V segments go with it too) in which
``/dev/shm`` is a tmpfs of its own, as large as the task's memory and with at most its budget
of files. Its pages are charged to the memory cgroup of the process that writes them (the
task's), and the tmpfs is gone when the last process of the task is: nothing is left behind.
Mounts made on the machine later still reach the task (the namespace is a slave of it).

A process behind the wall (``wall``: a learning, a build) gets ``/tmp`` and ``/var/tmp`` of its
own the same way (``private_mounts``): nothing it writes there outlives it or escapes its
memory budget. The folders the service keeps below them (a store in ``/tmp``, as in tests)
are bound back into the new ``/tmp``, so they stay what they were.

Nor may it write into the service's folders of users' things (the store, the scratch, the
venvs of runs) beyond what its budget counts (``fence``): in its mount namespace each of them
is read-only but the folders it writes (a task's folder and scratch, a build's venv and wheel
cache), bound back writable. A task user owns more than that (the owner's ended runs, her
live runs' venvs, her packages' venvs and wheel cache): no budget counts them, and they
outlive the task.

Only the standard library: the launcher imports it from its directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_RDONLY = 0x1
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
SHM = "/dev/shm"
TEMPORARY = ("/tmp", "/var/tmp", "/run/lock")
"""The machine's folders every user may write into, besides ``/dev/shm``."""


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def private_mounts(size_bytes: int, inodes: int, keep: list[str]) -> None:
    """Give this process (root) mount and IPC namespaces of its own in which ``/dev/shm``,
    ``/tmp`` and ``/var/tmp`` are tmpfs of ``size_bytes`` and ``inodes`` files each; the
    folders of ``keep`` below them are bound back where they were."""
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
    options = f"size={max(size_bytes, 1 << 20)},nr_inodes={max(inodes, 64)},mode=1777"
    flags = MS_NOSUID | MS_NODEV
    for folder in (SHM, *TEMPORARY):
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        below = _kept_below(folder, keep)
        held = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in below]
        try:
            _check(
                libc.mount(b"tmpfs", folder.encode(), b"tmpfs", flags, options.encode()), "mount"
            )
            for path, fd in zip(below, held, strict=True):
                os.makedirs(path, mode=0o755, exist_ok=True)
                source = f"/proc/self/fd/{fd}".encode()
                _check(libc.mount(source, path.encode(), None, MS_BIND | MS_REC, None), "bind")
        finally:
            for fd in held:
                os.close(fd)


def fence(roots: list[str], writable: list[str]) -> None:
    """In this process's own mount namespace (``private_mounts``), make the folders ``roots``
    read-only but ``writable`` (below them), bound back as they were: held open before, so
    their binds are of the writable mount. A root or a folder that is not there is passed
    over; a mount's ``nosuid``, ``nodev`` and ``noexec`` are kept."""
    libc = ctypes.CDLL(None, use_errno=True)
    held = []
    try:
        for path in writable:
            with contextlib.suppress(OSError):
                held.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)))
        for root in roots:
            if not os.path.isdir(root) or os.path.islink(root):
                continue
            kept = os.statvfs(root).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
            _check(libc.mount(root.encode(), root.encode(), None, MS_BIND | MS_REC, None), "bind")
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | kept
            _check(libc.mount(None, root.encode(), None, flags, None), "read-only")
        for path, fd in held:
            source = f"/proc/self/fd/{fd}".encode()
            _check(libc.mount(source, path.encode(), None, MS_BIND | MS_REC, None), "bind")
    finally:
        for _, fd in held:
            os.close(fd)


def _kept_below(folder: str, keep: list[str]) -> list[str]:
    """The outermost folders of ``keep`` that are below ``folder`` and exist."""
    root = Path(folder).resolve()
    found = sorted(
        {str(p) for p in (Path(k).resolve() for k in keep) if root in p.parents and p.is_dir()}
    )
    return [p for p in found if not any(p.startswith(q + "/") for q in found if q != p)]


def usable(*paths: Path) -> bool:
    """Whether a ``/dev/shm`` of a task's own can be mounted: as root, with the machine's one
    a folder, and none of the task's paths (the store, its scratch) below it."""
    if os.geteuid() != 0 or not os.path.isdir(SHM):
        return False
    shm = Path(SHM).resolve()
    return not any(shm == p or shm in p.parents for p in (q.resolve() for q in paths))
