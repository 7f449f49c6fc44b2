# ruff: noqa: F811  (the fixtures are imported from controller_support by name)
"""The controller and a task's folder: what a task planted there is neither followed, blocked
on nor believed (issue 27). Each test is an attack of the issue."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runs.backends import logs
from runs.common import store
from runs.control import reports, settling, states
from runs.models import Attempt, Observation, Task, TaskState
from tests.service.controller_support import (  # noqa: F401
    fake,
    fresh,
    home,
    launch,
    pod_log,
    poll,
    sent,
    task_dir,
    write_report,
)

pytestmark = pytest.mark.django_db

SWEEP_DONE = {
    "sweep-w0": "Succeeded",
    "sweep-extra(0:1)": "Succeeded",
    "sweep-extra(1:2)": "Succeeded",
    "sweep-merge": "Succeeded",
}


def finish_sweep(run, fake) -> None:
    fake.set_nodes(run.workflow, SWEEP_DONE)
    poll(fake)


class Blocked(BaseException):
    """A call blocked on a FIFO: not an ``Exception``, which the controller would swallow."""


def finishes(call: Callable[[], Any], fifo: Path, timeout: float = 10.0) -> Any:
    """The result of ``call``, failing if it blocks (on ``fifo``) for ``timeout`` seconds.

    It runs in this thread, which holds the test's database transaction; an alarm interrupts
    a blocked ``open`` or ``read``.
    """

    def blocked(signum: int, frame: Any) -> None:
        raise Blocked(f"blocked on the FIFO {fifo.name}")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)  # again, should one be swallowed
    try:
        return call()
    except Blocked as error:
        pytest.fail(str(error))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def bytes_read() -> int:
    """The bytes this process read so far (``rchar``: every read call, caches included)."""
    text = Path("/proc/self/io").read_text()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("rchar")))


# Logs the controller writes


def test_a_logs_folder_a_task_planted_with_a_link_as_a_log_is_moved_aside(launch, fake, tmp_path):
    run = launch()
    target = tmp_path / "root-only"
    target.write_text("untouched\n")
    folder = task_dir(run, "sweep") / "logs"
    folder.mkdir(parents=True)
    folder.chmod(0o777)  # the task's folder (as another user would own it), not the service's
    (folder / "sweep-w0-0.log").symlink_to(target)
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0(0)", "written by root\n")])
    finish_sweep(run, fake)
    poll(fake)
    assert target.read_text() == "untouched\n"
    assert Task.objects.get(run=run, task_id="sweep").logs_kept
    # The planted folder was moved aside; the log is in a folder of the service's own.
    kept = task_dir(run, "sweep") / "logs"
    assert not kept.is_symlink() and kept.stat().st_uid == os.geteuid()
    assert (kept / "sweep-w0-0.log").read_text() == "written by root\n"
    assert not (kept / "sweep-w0-0.log").is_symlink()


def test_a_logs_folder_that_is_a_link_is_not_written_into(launch, fake, tmp_path):
    run = launch()
    elsewhere = tmp_path / "elsewhere"  # another user's folder, or a root-only one
    elsewhere.mkdir()
    (task_dir(run, "sweep") / "logs").symlink_to(elsewhere)
    fake.set_logs(run.workflow, "sweep", [pod_log("sweep-w0(0)", "written by root\n")])
    finish_sweep(run, fake)
    poll(fake)
    assert list(elsewhere.iterdir()) == []
    kept = task_dir(run, "sweep") / "logs"
    assert not kept.is_symlink()
    assert (kept / "sweep-w0-0.log").read_text() == "written by root\n"


def test_keeping_logs_where_the_task_folder_is_gone_writes_nothing(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    assert logs.keep(store.TaskFolder(root, ("runs", "r", "tasks", "t")), [pod_log("sweep-w0")])
    assert list(root.iterdir()) == []


# Reports and their marks


def test_a_fifo_as_a_worker_report_is_skipped_without_blocking(launch):
    run = launch()
    workers = task_dir(run, "sweep") / "workers"
    workers.mkdir(parents=True)
    os.mkfifo(workers / "sweep-w0-0.json")
    folder = store.task_folder(run.id, "sweep")
    assert finishes(lambda: reports.report_names(folder), workers / "sweep-w0-0.json") == {}
    report = finishes(
        lambda: reports.read_report_counted(folder, "sweep-w0-0.json")[0],
        workers / "sweep-w0-0.json",
    )
    assert report is None


def test_a_fifo_as_a_worker_report_does_not_stall_the_controller(launch, fake):
    run = launch()
    workers = task_dir(run, "sweep") / "workers"
    workers.mkdir(parents=True)
    os.mkfifo(workers / "sweep-w0-0.json")
    fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
    finishes(lambda: finish_sweep(run, fake), workers / "sweep-w0-0.json")
    assert Task.objects.get(run=run, task_id="sweep").state == TaskState.DONE


def test_a_recorded_folder_a_task_replaced_by_a_link_gets_no_mark_through_it(
    launch, fake, tmp_path
):
    run = launch()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (task_dir(run, "sweep") / "recorded").symlink_to(elsewhere)
    write_report(run, "sweep-w0", 0)
    finish_sweep(run, fake)
    settling.settle_pending(backend=fake)
    assert list(elsewhere.iterdir()) == []
    marks = task_dir(run, "sweep") / "recorded"
    assert not marks.is_symlink() and (marks / "sweep-w0-0").exists()
    assert Observation.objects.filter(run=run, worker="sweep-w0").count() == 1


def test_marks_a_task_planted_do_not_hide_its_reports(launch, fake):
    run = launch()
    planted = task_dir(run, "sweep") / "recorded"
    planted.mkdir(parents=True)
    planted.chmod(0o777)  # a task's folder: others (the task) may write it
    (planted / "sweep-w0-0").touch()
    write_report(run, "sweep-w0", 0)
    finish_sweep(run, fake)
    settling.settle_pending(backend=fake)
    assert Observation.objects.filter(run=run, worker="sweep-w0").count() == 1


@pytest.mark.parametrize(
    "forged",
    [
        {"peak_memory_bytes": 10**18},
        {"peak_memory_bytes": 64 * 2**30},  # 64 GiB measured under a limit of a few GiB
        {"cpu_seconds": -5.0},
        {"cpu_seconds": float("nan")},
        {"seconds": float("inf")},
        {"unit_seconds": -1.0},
        {"processes": 10**9},
        {"processes": "2"},
        {"units_done": "all"},
        {"memory_limit_bytes": 10**18, "peak_memory_bytes": 10**17},
        {"per_worker_gb": float("nan")},
    ],
    ids=lambda forged: ",".join(forged),
)
def test_a_forged_report_is_not_stored(launch, fake, forged):
    run = launch()
    write_report(run, "sweep-w0", 0, **forged)
    write_report(run, "sweep-w1", 0, peak_memory_bytes=200 * 2**20)
    finish_sweep(run, fake)
    settling.settle_pending(backend=fake)
    observed = {o.worker: o for o in Observation.objects.filter(run=run)}
    assert "sweep-w0" not in observed, forged
    assert observed["sweep-w1"].peak_bytes == 200 * 2**20
    attempt = Attempt.objects.filter(task__run=run, worker="sweep-w0").first()
    assert attempt is None or attempt.peak_bytes is None or attempt.peak_bytes < 2**40


def test_cpu_seconds_beyond_what_the_processes_could_spend_are_cut(launch, fake):
    run = launch()
    write_report(run, "sweep-w0", 0, processes=2, seconds=10.0, cpu_seconds=10.0**9)
    finish_sweep(run, fake)
    settling.settle_pending(backend=fake)
    observation = Observation.objects.get(run=run, worker="sweep-w0")
    assert 0 < observation.cpu_seconds <= 2 * 10 * reports.CPU_SLACK + 60 + 1


def test_a_report_in_json_that_is_no_object_is_refused(launch):
    run = launch()
    path = write_report(run, "sweep-w0", 0)
    path.write_text(json.dumps([1, 2]))
    assert reports.read_report_counted(store.task_folder(run.id, "sweep"), path.name)[0] is None


# Progress


def test_a_sparse_giant_progress_file_is_read_at_most_to_its_cap(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    task = Task.objects.get(run=run, task_id="sweep")
    assert task.state == TaskState.RUNNING
    path = task_dir(run, "sweep") / "progress.jsonl"
    with path.open("wb") as file:
        file.write(b'{"unit": 0}\n{"unit": 1}\n')
        file.truncate(2**30)  # a sparse GiB: no disk, but a whole read is a GiB of memory
    before = bytes_read()
    changes = states._progress(task)
    read = bytes_read() - before
    assert read <= 2**20, read  # its cap, 64 KiB for a task of 6 units, and some slack
    assert changes["units_done"] == 2


def test_a_progress_file_that_is_a_link_or_a_fifo_is_not_read(launch, fake, tmp_path):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    task = Task.objects.get(run=run, task_id="sweep")
    path = task_dir(run, "sweep") / "progress.jsonl"
    (tmp_path / "other").write_text('{"unit": 0}\n{"unit": 1}\n')
    path.symlink_to(tmp_path / "other")
    assert states._progress(task) == {}
    path.unlink()
    os.mkfifo(path)
    assert finishes(lambda: states._progress(task), path) == {}


def test_progress_never_counts_more_units_than_its_task_has(launch, fake):
    run = launch()
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    task = fresh(run).tasks.get(task_id="sweep")
    lines = b"".join(b'{"unit": %d}\n' % unit for unit in range(10_000))
    (task_dir(run, "sweep") / "progress.jsonl").write_bytes(lines)
    assert states._progress(task)["units_done"] == task.units_total
