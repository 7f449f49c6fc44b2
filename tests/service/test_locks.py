"""Locks and flags shared by processes: in Redis, and in files for the embedded default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from runs.control import locks
from tests.settings import LOOP_REDIS

REDIS_URL = LOOP_REDIS
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["file", "redis"])
def kind(request, settings, tmp_path: Path) -> str:
    """Each test runs on the files of a SIMRUN_HOME of its own, and on Redis."""
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_LOCK_URL = REDIS_URL if request.param == "redis" else ""
    settings.CELERY_BROKER_URL = "filesystem://"
    assert locks.redis_url() == (REDIS_URL if request.param == "redis" else None)
    return request.param


@pytest.fixture
def name() -> str:
    return f"test-{uuid.uuid4().hex}"


def holder(
    kind: str, home: Path, name: str, *, ttl_s: float = locks.LOCK_TTL_S
) -> subprocess.Popen:
    """Another process that holds the lock ``name`` until it is killed."""
    script = textwrap.dedent(
        f"""
        import sys, time, django
        django.setup()
        from runs.control import locks
        locks.LOCK_TTL_S = {ttl_s}
        with locks.hold({name!r}) as held:
            print("held" if held else "busy", flush=True)
            time.sleep(600)
        """
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "SIMRUN_HOME": str(home),
        "SIMRUN_LOCK_URL": REDIS_URL if kind == "redis" else "",
        "CELERY_BROKER_URL": "filesystem://",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def wait_until_free(name: str, deadline_s: float) -> float:
    """Seconds until the lock could be taken; fails after the deadline."""
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        with locks.hold(name) as held:
            if held:
                return time.monotonic() - start
        time.sleep(0.05)
    pytest.fail(f"the lock {name} stayed held for {deadline_s} s")


def test_a_lock_is_held_by_one_holder_at_a_time(kind, name):
    with locks.hold(name) as first:
        assert first
        with locks.hold(name) as second:
            assert not second
        results = []
        thread = threading.Thread(target=lambda: results.append(locks.hold(name).__enter__()))
        thread.start()
        thread.join()
        assert results == [False]
    with locks.hold(name) as again:
        assert again


def test_a_lock_held_by_another_process_is_refused_until_it_dies(kind, name, processes, settings):
    process = holder(kind, settings.SIMRUN_HOME, name, ttl_s=1.0)
    processes.append(process)
    with locks.hold(name) as held:
        assert not held
    time.sleep(1.5)
    with locks.hold(name) as held:
        assert not held, "a live holder renews its lock"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    waited = wait_until_free(name, deadline_s=30)
    if kind == "file":
        assert waited < 1.0, "the kernel releases the lock of a dead process at once"


def test_a_flag_is_raised_once_until_it_is_lowered(kind, name):
    assert not locks.flag_raised(name)
    assert locks.raise_flag(name, ttl_s=60)
    assert not locks.raise_flag(name, ttl_s=60)
    assert locks.flag_raised(name)
    locks.lower_flag(name)
    assert not locks.flag_raised(name)
    assert locks.raise_flag(name, ttl_s=60)
    locks.lower_flag(name)


def test_a_flag_older_than_its_time_to_live_counts_as_lowered(kind, name):
    assert locks.raise_flag(name, ttl_s=0.2)
    deadline = time.monotonic() + 10
    while locks.flag_raised(name):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert locks.raise_flag(name, ttl_s=60)
    locks.lower_flag(name)


def test_redis_is_used_when_the_broker_is_redis(settings):
    settings.SIMRUN_LOCK_URL = ""
    settings.CELERY_BROKER_URL = REDIS_URL
    assert locks.redis_url() == REDIS_URL
    name = f"test-{uuid.uuid4().hex}"
    with locks.hold(name) as held:
        assert held
        assert redis.Redis.from_url(REDIS_URL).exists(f"simrun:lock:{name}")


def test_the_locks_in_files_never_import_the_redis_client(tmp_path):
    """The embedded service's processes (web, workers, beat, the step) lock with files: the
    Redis client, a tenth of a second or more of each one's start, is not imported."""
    code = textwrap.dedent(
        """
        import sys
        import django
        django.setup()
        from runs.control import locks
        with locks.hold("probe") as held:
            assert held
        print(sorted(m for m in sys.modules if m.split(".")[0] == "redis"))
        """
    )
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SIMRUN_", "CELERY_", "DATABASE_", "DJANGO_"))
        },
        "SECRET_KEY": "test",
        "SIMRUN_HOME": str(tmp_path / "home"),
        "DJANGO_SETTINGS_MODULE": "simrun_site.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
