"""Helpers of the harness tests: task directories in the store, environments, processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.execute import THREAD_VARIABLES
from harness.report import HARNESS_STARTED, WorkerReport, read_report, report_path
from harness.sources import SOURCES_INSTALLED

PLAN = {
    "cores": 2,
    "memory_gb": 1.0,
    "workers": 1,
    "base_gb": 0.1,
    "per_worker_gb": 0.1,
    "processes": 2,
    "retry_memory_gb": 2.0,
    "coordinator_merges": False,
    "why": "tests",
}
PROGRAMS = {"worker": "harness.worker", "merge": "harness.merge", "exec": "harness.execute"}


def make_task(
    store: Path,
    type_: str,
    settings: Mapping[str, Any],
    *,
    task: str = "sweep",
    run: str = "r1",
    kind: str = "split",
    **plan: Any,
) -> Path:
    """A task directory ``<store>/runs/<run>/tasks/<task>`` with the ``task.json`` of the
    service (``runs/planning/records.py:task_json``)."""
    task_dir = store / "runs" / run / "tasks" / task
    task_dir.mkdir(parents=True)
    data = {
        "run": run,
        "task": task,
        "kind": kind,
        "type": type_,
        "settings": dict(settings),
        "inputs": {},
        "command": None,
        "plan": {**PLAN, **plan},
        "units": None,
    }
    (task_dir / "task.json").write_text(json.dumps(data))
    return task_dir


def clean_environ(**values: str) -> dict[str, str]:
    """This process's environment without any ``SIMRUN_*``, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_")}
    env.update(values)
    return env


@pytest.fixture
def harness_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set this process's ``SIMRUN_*`` environment for a ``main([...])`` called in-process."""

    def apply(**values: str) -> None:
        for name in list(os.environ):
            if name.startswith("SIMRUN_"):
                monkeypatch.delenv(name)
        for name in (*THREAD_VARIABLES, HARNESS_STARTED, SOURCES_INSTALLED):
            monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the test
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return apply


def spawn(
    program: str,
    env: Mapping[str, str],
    log: Path,
    *args: str,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``simrun-<program>`` as a real process in its own session, its output in ``log``."""
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", PROGRAMS[program], *args],
            env=dict(env),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )


def block_sigterm() -> None:
    """A ``preexec_fn``: the program starts with SIGTERM blocked, so one sent now waits for
    the program's own handler (which unblocks it)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def finish(process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> int:
    """Wait for a process; on a timeout kill its group and fail with its log."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"still running after {timeout} s:\n{log.read_text()}")


def progress_units(task_dir: Path) -> list[int]:
    """The units of ``progress.jsonl``, in the order written."""
    path = task_dir / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["unit"] for line in path.read_text().splitlines()]


def claims(task_dir: Path) -> list[str]:
    """The claims in the ledger now."""
    directory = task_dir / "units" / "claims"
    return sorted(os.listdir(directory)) if directory.exists() else []


def report_of(task_dir: Path, worker: str, attempt: int = 0) -> WorkerReport:
    return read_report(report_path(task_dir, worker, attempt))


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Path]:
    """A directory for the output of spawned processes."""
    directory = tmp_path / "logs"
    directory.mkdir()
    yield directory
