"""The control loop in real Celery: a worker and beat as processes, Redis, PostgreSQL.

The worker and beat run against this test's database (pytest-django's ``test_<NAME>``, rows
committed by ``transaction=True``), Redis database 5, and the fake backend shared through a
state file, which the test scripts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import yaml
from celery import Celery
from django.db import connection

from harness.tasktypes import task_types
from runs.backends.base import BackendStatus, workflow_name
from runs.backends.fake import FakeBackend
from runs.models import Run, RunState, Task, TaskState
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.polling import wait_for
from tests.settings import LOOP_REDIS

REDIS_URL = LOOP_REDIS
ROOT = Path(__file__).resolve().parents[2]
SWEEP = {"tasks": {"sweep": {"type": "squares", "settings": {"n": 4}, "workers": 2}}}

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def database_url() -> str:
    """The URL of this test's database, for the worker and beat."""
    db = connection.settings_dict
    return (
        f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )


class Service:
    """A Celery worker and beat of the service, and the fake backend they share."""

    def __init__(self, tmp_path: Path, settings, poll_s: float) -> None:
        self.folder = tmp_path
        self.backend = FakeBackend(state_file=tmp_path / "fake.json")
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": REDIS_URL,
            "SIMRUN_LOCK_URL": "",
            "SIMRUN_BACKEND": "fake",
            "SIMRUN_FAKE_STATE": str(self.backend.state_file),
            "SIMRUN_STORE": str(settings.SIMRUN_STORE),
            "SIMRUN_HOME": str(tmp_path / "home"),
            "SIMRUN_POLL_S": str(poll_s),
            "SIMRUN_SETTLE_S": "30",
        }
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, *args: str) -> None:
        log = (self.folder / f"{name}.log").open("w")
        command = [sys.executable, "-m", "celery", "-A", "simrun_site", *args]
        process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=log)
        self.processes.append((name, process))

    def stop(self) -> None:
        for _, process in self.processes:
            process.terminate()
        for _, process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{(self.folder / f'{name}.log').read_text()[-3000:]}"
            for name, _ in self.processes
        )

    def wake(self) -> None:
        """``waking.wake()`` in a process of the service."""
        script = "import django; django.setup(); from runs.control.waking import wake; wake()"
        subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=self.env, check=True)


@pytest.fixture
def service(tmp_path: Path, settings) -> Iterator[Callable[[float], Service]]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    started: list[Service] = []

    def start(poll_s: float) -> Service:
        found = Service(tmp_path, settings, poll_s)
        common = ["--loglevel=INFO"]
        found.start(
            "worker",
            "worker",
            "--concurrency=2",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *common,
        )
        found.start("beat", "beat", f"--schedule={tmp_path / 'beat-schedule'}", *common)
        started.append(found)
        return found

    yield start
    for found in started:
        found.stop()
    redis.Redis.from_url(REDIS_URL).flushdb()


def submit(owner, service: Service) -> Run:
    """Create a run as the API does and send its submission through Redis."""
    spec = parse_spec(yaml.safe_dump(SWEEP), types=task_types())
    run = create_run(spec=spec, owner=owner, backend=service.backend)
    producer = Celery(broker=REDIS_URL, set_as_current=False)
    producer.send_task("runs.tasks.submit_run", args=[run.id])
    producer.close()
    return run


def state(run: Run) -> str:
    return Run.objects.get(pk=run.pk).state


@pytest.fixture
def no_submission_on_commit(monkeypatch):
    """The submission is sent through Redis by the test, not by the test process's broker."""
    from runs import tasks

    monkeypatch.setattr(tasks.submit_run, "delay", lambda run_id: None)


def test_beat_reconciles_a_submitted_run_to_succeeded(owner, service, no_submission_on_commit):
    found = service(2.0)
    run = submit(owner, found)
    workflow = workflow_name(run.id)
    with found.backend.state() as backend:
        backend.workflows[workflow] = BackendStatus(phase="Running", tasks={"sweep-w0": "Running"})
    sweep = Task.objects.get(run=run)
    running = lambda: Task.objects.get(pk=sweep.pk).state == TaskState.RUNNING  # noqa: E731
    wait_for(running, 60, "the reconcile woken by the submission", details=found.logs)
    found.backend.finish(workflow)
    wait_for(
        lambda: state(run) == RunState.SUCCEEDED, 60, "the reconcile by beat", details=found.logs
    )
    # The terminal record is written first; its pending work is cleared after the stop.
    settled = lambda: not Run.objects.get(pk=run.pk).live  # noqa: E731
    wait_for(settled, 60, "the settling of the ended run", details=found.logs)
    assert ["stop", [workflow]] in [[n, a] for n, a in found.backend.calls]


def test_a_wake_up_reconciles_sooner_than_the_poll(owner, service, no_submission_on_commit):
    poll_s = 120.0
    found = service(poll_s)
    run = submit(owner, found)
    wait_for(lambda: state(run) == RunState.RUNNING, 60, "the submission", details=found.logs)
    workflow = Run.objects.get(pk=run.pk).workflow
    # The submission wakes the loop once: let that reconcile read the running workflow first.
    polled = lambda: ["status", [workflow]] in [[n, a] for n, a in found.backend.calls]  # noqa: E731
    wait_for(polled, 60, "the reconcile woken by the submission", details=found.logs)
    found.backend.finish(workflow)
    time.sleep(3)
    assert state(run) == RunState.RUNNING, "nothing reconciles before the poll or a wake-up"
    woken = time.monotonic()
    found.wake()
    wait_for(
        lambda: state(run) == RunState.SUCCEEDED,
        60,
        "the reconcile on a wake-up",
        details=found.logs,
    )
    assert time.monotonic() - woken < poll_s / 2


def test_a_submission_whose_message_was_lost_is_handed_on_by_the_loop(
    owner, service, no_submission_on_commit
):
    """The worker that took the submission died with it: beat's loop sends it again."""
    found = service(1.0)
    spec = parse_spec(yaml.safe_dump(SWEEP), types=task_types())
    run = create_run(spec=spec, owner=owner, backend=found.backend)  # its message goes nowhere
    wait_for(lambda: state(run) == RunState.RUNNING, 60, "the loop's hand-on", details=found.logs)
    assert Run.objects.get(pk=run.pk).workflow == workflow_name(run.id)
