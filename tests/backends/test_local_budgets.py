"""What one task may spend of what every user shares, on the local backend: the bytes of its log
(head and tail kept), the files and bytes of its folder and scratch, how deep they nest, and a
``/dev/shm`` of its own (real processes on a tmpfs of the test's own)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import logcap, untrusted
from harness.report import read_report
from runs.backends.local.backend import LocalBackend, workflow_name
from runs.backends.local.budget import Budget, Ledger, UserBudget
from runs.common.store import TaskFolder
from runs.reads.live_attempts import read_live
from tests.backends.local_fixtures import (
    ended,
    log_of,
    phase,
    plan,
    shell,
    stepping,
    submit,
    until_flag,
)
from tests.floods import tmpfs
from tests.polling import wait_for

pytestmark = pytest.mark.django_db

DEEP = "import os; [os.mkdir('d') or os.chdir('d') for _ in range(3000)]"
"""A program that makes a chain of 3000 folders in its working folder (its scratch)."""
BUDGET = Budget(files=500, bytes=4 << 20, depth=16, check_s=0.2)
LOG_BYTES = 64 << 10


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """The store and the scratch on a small tmpfs of the test's own."""
    with tmpfs(tmp_path / "disk", size_mb=48, inodes=20_000) as disk:
        yield disk


@pytest.fixture
def backend(disk: Path) -> LocalBackend:
    return LocalBackend(
        store=disk / "store",
        scratch=disk / "scratch",
        cores=2,
        memory_gb=4,
        grace_s=1,
        enforce_memory=False,
        budget=BUDGET,
        log_bytes=LOG_BYTES,
    )


def run_to_end(backend: LocalBackend, run_id: str, script: str) -> dict:
    with stepping(backend):
        submit(backend, run_id, {"t": {"command": shell(script)}})
        wait_for(lambda: ended(backend, run_id), what=f"the end of {run_id}")
    status = backend.status(workflow_name(run_id))
    return {"phase": status.phase, "failed": status.failed.get("t", [])}


def test_a_log_of_megabytes_keeps_its_head_and_tail_within_its_budget(backend):
    # 4 MiB of numbered lines, 64 times the budget, then a last line.
    script = "seq 1 500000; echo the-last-line"
    end = run_to_end(backend, "l1", script)
    log = log_of(backend, "l1", "t", "t").read_bytes()

    assert end["phase"] == "Succeeded"  # printing much is no failure
    assert len(log) <= LOG_BYTES + 200
    assert log.startswith(b"1\n2\n3\n")
    assert log.rstrip().endswith(b"499999\n500000\nthe-last-line")
    marker = next(line for line in log.splitlines() if line.startswith(b"[simrun]"))
    dropped = int(marker.split()[1])
    printed = len("".join(f"{i}\n" for i in range(1, 500001))) + len("the-last-line\n")
    assert dropped == printed - (len(log) - len(marker) - 2)


def test_a_capped_log_is_never_larger_than_its_budget_while_it_grows(tmp_path):
    path = tmp_path / "a.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    log = logcap.CappedLog(fd, 4096)
    sizes = []
    for i in range(2000):
        log.write(f"line {i}\n".encode())
        sizes.append(path.stat().st_size)
    os.close(fd)
    marker = len(logcap.marker(0, 2048, 1024))
    assert max(sizes) <= 4096 + marker
    text = path.read_text()
    assert text.startswith("line 0\n") and text.endswith("line 1999\n")
    assert f"{log.dropped} bytes dropped here" in text


def test_a_task_over_its_budget_of_files_fails_naming_it_and_its_files_go(backend):
    script = 'i=0; while [ $i -lt 5000 ]; do : > "$SIMRUN_OUT/f$i"; i=$((i+1)); done'
    end = run_to_end(backend, "f1", script)

    assert end["phase"] == "Failed"
    [failed] = end["failed"]  # no retry: it would do it again
    assert "SIMRUN_TASK_FILES_MAX" in failed.message and "500" in failed.message
    out = backend.store / "runs" / "f1" / "tasks" / "t" / "out"
    assert not out.exists() or not any(out.iterdir())


def test_a_task_that_ended_over_its_budget_before_a_count_fails_too(backend):
    slow = LocalBackend(**{**_settings(backend), "budget": Budget(500, 4 << 20, 16, 600.0)})
    end = run_to_end(slow, "f2", 'for i in $(seq 600); do : > "$SIMRUN_OUT/f$i"; done')

    assert end["phase"] == "Failed"
    assert "SIMRUN_TASK_FILES_MAX" in end["failed"][0].message


def test_a_file_larger_than_the_bytes_budget_is_cut_by_the_kernel(backend, disk):
    end = run_to_end(backend, "b1", 'head -c 40M /dev/zero > "$SIMRUN_OUT/big"; echo "exit $?"')
    log = log_of(backend, "b1", "t", "t").read_text()

    assert end["phase"] == "Failed"
    assert "SIMRUN_TASK_DISK_GB" in end["failed"][0].message
    assert "exit 153" in log  # SIGXFSZ: the write beyond the budget was refused
    assert os.statvfs(disk).f_bfree * os.statvfs(disk).f_frsize > 40 << 20


def test_many_files_over_the_bytes_budget_fail_naming_it(backend):
    script = 'for i in 1 2 3 4 5 6; do head -c 1M /dev/zero > "$HOME/part$i"; done'
    end = run_to_end(backend, "b2", script)
    assert end["phase"] == "Failed"
    assert "SIMRUN_TASK_DISK_GB" in end["failed"][0].message


def test_folders_nested_deeper_than_the_budget_fail_and_the_scratch_still_goes(backend):
    # 3000 levels in the scratch, then the task ends: the launcher's removal of the scratch
    # (shutil.rmtree recursed) crashed on a tree this deep, and the attempt was lost.
    end = run_to_end(backend, "d1", f"{sys.executable} -c {shlex.quote(DEEP)}")

    assert end["phase"] == "Failed"
    [failed] = end["failed"]
    assert "SIMRUN_TASK_DEPTH_MAX" in failed.message
    assert not (backend.scratch / "d1" / "t-0").exists()  # removed by its launcher


@pytest.mark.skipif(os.geteuid() != 0, reason="a /dev/shm of a task's own needs root")
def test_a_task_s_dev_shm_is_its_own_as_large_as_its_memory_and_gone_with_it(backend):
    script = (
        "head -c 1M /dev/zero > /dev/shm/simrun-left-behind && "
        "df -k /dev/shm | tail -1 | awk '{print \"shm-kib\", $2}'; "
        "for i in $(seq 40); do head -c 2M /dev/zero > /dev/shm/part$i || break; done; "
        'echo "parts $i"'
    )
    with stepping(backend):
        submit(backend, "s1", {"t": {"command": shell(script)}}, {"t": plan(memory_gb=1 / 16)})
        wait_for(lambda: ended(backend, "s1"), what="the end of s1")
    log = log_of(backend, "s1", "t", "t").read_text()

    assert phase(backend, "s1") == "Succeeded", log
    assert not Path("/dev/shm/simrun-left-behind").exists()
    assert "shm-kib 65536" in log  # the task's memory: 64 MiB
    assert "parts 32" in log  # 1 MiB, then 31 parts of 2 MiB fit; the 32nd did not


def test_what_a_task_holds_in_dev_shm_is_counted_in_its_memory(disk):
    """Its tmpfs pages are charged to its own memory cgroup, as its heap is: its peak (what
    sizing learns, and what the kernel holds to its limit) counts them."""
    backend = LocalBackend(
        store=disk / "store", scratch=disk / "scratch", cores=2, memory_gb=4, grace_s=1
    )
    assert backend.enforces_memory
    script = "head -c 40M /dev/zero > /dev/shm/held && sleep 0.2"
    with stepping(backend):
        submit(backend, "m1", {"t": {"command": shell(script)}}, {"t": plan(memory_gb=1 / 4)})
        wait_for(lambda: ended(backend, "m1"), what="the end of m1")
    report = read_report(backend.store / "runs/m1/tasks/t/workers/t-0.json")

    assert phase(backend, "m1") == "Succeeded"
    assert report.peak_source.startswith("cgroup-")
    assert 40 << 20 <= report.peak_memory_bytes < 100 << 20  # a shell and its 40 MiB of shm


def test_what_a_task_holds_in_dev_shm_is_in_its_live_memory(disk):
    """The run page's live memory of a plain command counted its anonymous memory only: a task
    holding 40 MiB in its /dev/shm showed a few MiB while its cgroup held 40 more."""
    backend = LocalBackend(
        store=disk / "store", scratch=disk / "scratch", cores=2, memory_gb=4, grace_s=1
    )
    flag = disk / "go"
    script = f'head -c 40M /dev/zero > /dev/shm/held; while [ ! -e "{flag}" ]; do sleep 0.05; done'
    folder = TaskFolder(backend.store, ("runs", "m2", "tasks", "t"))

    def holding() -> bool:
        live = read_live(folder, "t", 0)
        return live is not None and bool(live.samples) and live.samples[-1][1] >= 40 << 20

    with stepping(backend):
        submit(backend, "m2", {"t": {"command": shell(script)}}, {"t": plan(memory_gb=1 / 4)})
        wait_for(holding, 30, "the live memory to count the task's 40 MiB of /dev/shm")
        flag.touch()
        wait_for(lambda: ended(backend, "m2"), what="the end of m2")
    assert phase(backend, "m2") == "Succeeded"


def _settings(backend: LocalBackend) -> dict:
    return _settings_of(backend.store.parent)


def _settings_of(disk: Path) -> dict:
    return {
        "store": disk / "store",
        "scratch": disk / "scratch",
        "cores": 2,
        "memory_gb": 4,
        "grace_s": 1,
        "enforce_memory": False,
        "log_bytes": LOG_BYTES,
    }


def test_the_budget_s_walk_follows_no_link_out_of_the_task(backend, disk):
    outside = disk / "outside"
    outside.mkdir()
    for i in range(600):
        (outside / f"{i}").touch()
    end = run_to_end(backend, "k1", f'ln -s {outside} "$SIMRUN_OUT/elsewhere"; sleep 0.5')
    assert end["phase"] == "Succeeded"
    assert len(list(outside.iterdir())) == 600
    assert phase(backend, "k1") == "Succeeded"


def _held(backend: LocalBackend, owner: int) -> int:
    """The files the running tasks of ``owner`` hold, as their launchers' counts say."""
    total = 0
    for entry in (backend.state / "usage" / str(owner)).glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            total += json.loads(entry.read_text())["files"]
    return total


def test_two_tasks_of_a_user_each_within_its_budget_but_over_the_users_fail_the_second(disk):
    # Each task keeps 300 files (its budget is 500); the user's running tasks may keep 500
    # together: the first holds its 300 and waits, the second's 300 take them past it.
    flag = disk / "flag"
    backend = LocalBackend(
        **{**_settings_of(disk), "cores": 3},
        budget=BUDGET,
        user_budget=UserBudget(files=500, bytes=1 << 30),
    )
    write = 'for i in $(seq 300); do : > "$SIMRUN_OUT/f$i"; done'
    with stepping(backend):
        submit(backend, "u1", {"t": {"command": until_flag(flag, write)}}, owner=1)
        wait_for(lambda: _held(backend, 1) >= 300, what="the first task's count in the ledger")
        submit(backend, "u2", {"t": {"command": until_flag(flag, write)}}, owner=1)
        wait_for(lambda: ended(backend, "u2"), what="the end of the second task")
        # Another user's task keeps as much meanwhile: the first user's budget is not its.
        submit(backend, "o1", {"t": {"command": shell(write)}}, owner=2)
        wait_for(lambda: ended(backend, "o1"), what="the end of the other user's task")
        assert phase(backend, "u1") == "Running"  # holding what it holds fails nothing
        flag.touch()
        wait_for(lambda: ended(backend, "u1"), what="the end of the first task")
        second = backend.status(workflow_name("u2"))
        assert backend.status(workflow_name("u1")).phase == "Succeeded"
        assert backend.status(workflow_name("o1")).phase == "Succeeded"
        assert second.phase == "Failed"
        [failed] = second.failed["t"]
        assert "SIMRUN_USER_FILES_MAX" in failed.message and "500" in failed.message
        out = backend.store / "runs" / "u2" / "tasks" / "t" / "out"
        assert not out.exists() or not any(out.iterdir())  # what it wrote was removed
        assert list((backend.state / "usage" / "1").iterdir()) == []  # each count left


def test_a_count_of_a_launcher_that_died_is_passed_over(tmp_path):
    ledger = tmp_path / "usage"
    ledger.mkdir()
    budget = UserBudget(files=100, bytes=1 << 30)
    dead = {"files": 1000, "bytes": 0, "pid": os.getpid(), "start": -1}
    (ledger / "gone.json").write_text(json.dumps(dead))
    mine = Ledger(budget, ledger, "mine")
    assert mine.over(untrusted.Usage(50, 4096)) is None
    assert not (ledger / "gone.json").exists()
    other = Ledger(budget, ledger, "other")
    assert "SIMRUN_USER_FILES_MAX" in (other.over(untrusted.Usage(60, 4096)) or "")
    assert mine.over(untrusted.Usage(50, 4096)) is None  # it did not grow
    assert "SIMRUN_USER_DISK_GB" in (
        Ledger(UserBudget(files=1000, bytes=8192), ledger, "third").over(untrusted.Usage(1, 4097))
        or ""
    )
    mine.leave()
    assert not (ledger / "mine.json").exists()


def test_files_beside_the_task_folder_in_its_run_folder_count_against_its_budget(backend):
    """Its task user owns its run's folder too: 2 MiB beside the run's task folders and 3 MiB
    in the run's folder are 5 MiB of a 4 MiB budget, and are removed with what it wrote; as
    root, the run's folder beside its own is read-only to it (``shm.fence``): nothing lands."""
    script = (
        'head -c 2M /dev/zero > "$SIMRUN_OUT/../../beside" && '
        'head -c 3M /dev/zero > "$SIMRUN_OUT/../../../beside" && sleep 30'
    )
    end = run_to_end(backend, "r1", script)

    assert end["phase"] == "Failed"
    fenced = os.geteuid() == 0
    said = "Read-only file system" if fenced else "SIMRUN_TASK_DISK_GB"
    assert said in end["failed"][0].message
    run = backend.store / "runs" / "r1"
    assert not (run / "beside").exists() and not (run / "tasks" / "beside").exists()
    assert (run / "tasks" / "t").is_dir()  # its own folder, the service's files in it, stays


@pytest.mark.skipif(os.geteuid() != 0, reason="a /tmp of a task's own needs root")
def test_a_task_s_tmp_and_var_tmp_are_its_own_and_gone_with_it(backend):
    mark = f"simrun-left-behind-{os.getpid()}-{id(backend)}"
    script = (
        f"head -c 1M /dev/zero > /tmp/{mark} && head -c 1M /dev/zero > /var/tmp/{mark} && "
        "df -k /tmp | tail -1 | awk '{print \"tmp-kib\", $2}'"
    )
    with stepping(backend):
        submit(backend, "s2", {"t": {"command": shell(script)}}, {"t": plan(memory_gb=1 / 16)})
        wait_for(lambda: ended(backend, "s2"), what="the end of s2")
    log = log_of(backend, "s2", "t", "t").read_text()

    assert phase(backend, "s2") == "Succeeded", log
    assert "tmp-kib 65536" in log  # a tmpfs as large as its memory, counted in it
    assert not Path("/tmp", mark).exists() and not Path("/var/tmp", mark).exists()
