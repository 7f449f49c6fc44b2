"""Locks and flags shared by the processes of the service: in Redis, or in files on one machine.

The control loop runs in Celery processes that come and go: at most one reconcile runs at a
time, one submission of a run at a time, and a wake-up flag keeps wake-ups from piling up.
With Redis (``SIMRUN_LOCK_URL``, else a Redis broker) they are keys with a time to live, a
held lock renewed by a thread; in the embedded default (SQLite and the filesystem broker, so
one machine) they are ``flock``\\ s and files under ``SIMRUN_HOME/locks``, which the kernel
releases when the process holding them dies. That folder is the service's alone (no access
for others), and its files are named by a digest of the lock's name keyed with the secret
key, so a task that reached it still would learn no run id.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:  # imported where used: the embedded service's locks are files
    import redis

log = logging.getLogger(__name__)

LOCK_TTL_S = 60.0
"""A Redis lock of a process that died is free after this; a live holder renews it."""
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def redis_url() -> str | None:
    """The Redis of the locks: ``SIMRUN_LOCK_URL``, else a Redis broker; None: files."""
    url = settings.SIMRUN_LOCK_URL or settings.CELERY_BROKER_URL
    return url if url.startswith(REDIS_SCHEMES) else None


@cache
def _client(url: str) -> redis.Redis:
    import redis  # a tenth of a second of a worker's start that uses files, not Redis

    return redis.Redis.from_url(url)


def _path(name: str, suffix: str) -> Path:
    """The file of a lock or flag: in a folder closed to others, named by a keyed digest
    (a run id in a lock's name is never in a file's name)."""
    folder = Path(settings.SIMRUN_HOME) / "locks"
    folder.mkdir(mode=0o770, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o007:
        folder.chmod(0o770)
    key = hashlib.blake2b(str(settings.SECRET_KEY).encode(), digest_size=32).digest()
    digest = hashlib.blake2b(name.encode(), key=key, digest_size=16).hexdigest()
    return folder / f"{digest}.{suffix}"


@contextmanager
def hold(name: str) -> Iterator[bool]:
    """Hold the lock ``name`` if it is free, without waiting; yields whether it is held."""
    url = redis_url()
    holder = _hold_redis(url, name) if url else _hold_file(name)
    with holder as held:
        yield held


@contextmanager
def _hold_file(name: str) -> Iterator[bool]:
    handle = os.open(_path(name, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)


@contextmanager
def _hold_redis(url: str, name: str) -> Iterator[bool]:
    from redis.exceptions import LockError

    lock = _client(url).lock(f"simrun:lock:{name}", timeout=LOCK_TTL_S, thread_local=False)
    if not lock.acquire(blocking=False):
        yield False
        return
    stop = threading.Event()
    renewal = threading.Thread(target=_renew, args=(lock, stop), daemon=True)
    renewal.start()
    try:
        yield True
    finally:
        stop.set()
        renewal.join()
        try:
            lock.release()
        except LockError:
            log.warning("lock %s expired while held", name)


def held(name: str) -> bool:
    """Whether a process holds the lock ``name``; a probe that leaves it as it was."""
    url = redis_url()
    if url:
        return bool(_client(url).exists(f"simrun:lock:{name}"))
    with _hold_file(name) as taken:
        return not taken


def _renew(lock: redis.lock.Lock, stop: threading.Event) -> None:
    """Reset the time to live of a held lock until ``stop`` is set."""
    import redis
    from redis.exceptions import LockError

    while not stop.wait(LOCK_TTL_S / 3):
        try:
            lock.reacquire()
        except (LockError, redis.RedisError):
            log.exception("cannot renew the lock %s", lock.name)


def raise_flag(name: str, *, ttl_s: float) -> bool:
    """Raise the flag ``name`` for ``ttl_s`` seconds; whether it was down.

    A flag file's modification time is its expiry, so it holds its time to live as a Redis
    key does; it appears complete (a link of a file already dated) or not at all.
    """
    url = redis_url()
    if url:
        return bool(_client(url).set(f"simrun:flag:{name}", b"1", nx=True, px=int(ttl_s * 1000)))
    path = _path(name, "flag")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    expiry = time.time() + ttl_s
    os.utime(temporary, (expiry, expiry))
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        if _expiry(path) > time.time():
            return False
        os.replace(temporary, path)
        return True
    finally:
        Path(temporary).unlink(missing_ok=True)


def lower_flag(name: str) -> None:
    """Lower the flag ``name``."""
    url = redis_url()
    if url:
        _client(url).delete(f"simrun:flag:{name}")
    else:
        _path(name, "flag").unlink(missing_ok=True)


def flag_raised(name: str) -> bool:
    """Whether the flag ``name`` is up (raised and not expired)."""
    url = redis_url()
    if url:
        return bool(_client(url).exists(f"simrun:flag:{name}"))
    return _expiry(_path(name, "flag")) > time.time()


def _expiry(path: Path) -> float:
    """When a flag file expires; 0 when there is none."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
