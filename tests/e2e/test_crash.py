"""Crashes of the service in the middle of a run: the run reaches its end, nothing is left."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.service import (
    Service,
    run_processes,
    service_processes,
    submit,
    wait_until_ended,
)
from tests.polling import wait_for

pytestmark = pytest.mark.slow

SWEEP = {"tasks": {"sq": {"type": "squares", "settings": {"n": 40, "delay_s": 0.5}}}}
"""About 10 s on two processes: long enough to crash the service in the middle of it."""


def celery_worker(service: Service) -> int | None:
    """The main process of the Celery worker of a serve, None while it has none."""
    assert service.process is not None
    # Its title names its host name (``serve.children``), whether Celery has set its own yet
    # or not; the learner's is simrun-learner-PID.
    name = f"simrun-{service.process.pid}@".encode()
    for pid in service_processes(service.process.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            parent = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except OSError:
            continue
        if name in cmdline and parent == service.process.pid:
            return pid
    return None


def attempts(service: Service, run_id: str) -> list[str]:
    logs = service.store / "runs" / run_id / "tasks" / "sq" / "logs"
    return sorted(p.stem for p in logs.glob("*.launch"))


def running(service: Service, run_id: str) -> bool:
    """Whether the run's first units are done: read from the store, which the API shows only
    after its next reconcile, when a short run may have ended already."""
    progress = service.store / "runs" / run_id / "tasks" / "sq" / "progress.jsonl"
    return progress.exists() and progress.stat().st_size > 0


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    """One serve for the module's crashes, one after another: each test starts it again if
    its crash stopped it, as a user does, so the next finds it as a user would."""
    started = Service(home=tmp_path_factory.mktemp("crash") / "home")
    started.start()
    yield started
    if started.process is not None:
        started.stop()


@pytest.fixture(scope="module")
def token(service: Service) -> str:
    return service.user("alice")


def test_a_run_survives_a_sigkill_of_the_celery_worker(service: Service, token: str):
    with service.client(token) as api:
        run_id = submit(api, SWEEP)
        wait_for(lambda: running(service, run_id), 120, "the first units")
        worker = celery_worker(service)
        assert worker is not None
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: celery_worker(service) not in {None, worker}, 60, "a new worker")
        run = wait_until_ended(api, run_id)
    assert run["state"] == "succeeded", run
    assert attempts(service, run_id) == ["sq-w0-0"]
    assert run_processes(service.store, run_id) == []


def test_a_run_survives_a_sigkill_of_the_whole_service_and_a_start_again(
    service: Service, token: str
):
    with service.client(token) as api:
        run_id = submit(api, SWEEP)
        wait_for(lambda: running(service, run_id), 120, "the first units")
    service.crash()
    assert run_processes(service.store, run_id), "the processes of the run go on"
    service.start()
    with service.client(token) as api:
        run = wait_until_ended(api, run_id)
    assert run["state"] == "succeeded", run
    assert attempts(service, run_id) == ["sq-w0-0"]  # adopted, not started again
    assert run_processes(service.store, run_id) == []


def test_after_a_crash_the_processes_of_a_run_cancelled_meanwhile_are_killed(
    service: Service, token: str
):
    with service.client(token) as api:
        slow = {"tasks": {"sq": {"type": "squares", "settings": {"n": 500, "delay_s": 1}}}}
        run_id = submit(api, slow)
        wait_for(lambda: running(service, run_id), 120, "the first units")
    service.crash()
    assert run_processes(service.store, run_id)
    (service.store / "local" / "runs" / f"simrun-{run_id}.json").unlink()  # now unknown
    service.start()
    wait_for(lambda: not run_processes(service.store, run_id), 60, "the orphans to be killed")
