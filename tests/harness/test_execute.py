"""simrun-exec: staged inputs, the command's environment, exit codes, SIGTERM passed on."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import execute
from harness.execute import THREAD_VARIABLES
from harness.lifecycle import note_retry_memory
from tests.harness.processes import clean_environ, finish, spawn
from tests.harness.task_dirs import make_task, report_of
from tests.polling import wait_for

SHOW_ENV = (
    "import json, os, sys\n"
    "names = [*sys.argv[1:], 'SIMRUN_OUT']\n"
    "data = {'cwd': os.getcwd(), 'python': sys.executable,\n"
    "        'env': {n: os.environ.get(n) for n in names}}\n"
    "open(os.path.join(os.environ['SIMRUN_OUT'], 'env.json'), 'w').write(json.dumps(data))"
)


def _upstream(store: Path) -> Path:
    """The ``out/`` of a finished task with two CSV files."""
    out = store / "runs" / "r1" / "tasks" / "sweep" / "out"
    (out / "more").mkdir(parents=True)
    (out / "a.csv").write_text("unit,square,name\n0,0,x\n1,1,y\n")
    (out / "more" / "b.csv").write_text("unit,square,name\n2,4,z\n3,9,w\n")
    (out / "notes.txt").write_text("not a table")
    return out


def test_csv_stats_reads_its_staged_port_and_writes_stats_json(
    store: Path, tmp_path: Path, harness_env
) -> None:
    _upstream(store)
    task_dir = make_task(store, "csv-stats", {}, task="stats", kind="plugin")
    scratch = tmp_path / "scratch"
    harness_env(
        SIMRUN_TASK_DIR=str(task_dir),
        SIMRUN_INPUTS="table=runs/r1/tasks/sweep/out",
        SIMRUN_SCRATCH=str(scratch),
        SIMRUN_ATTEMPT="2",
    )

    code = execute.main(["python", "-m", "harness.examples.csv_stats", "--port", "table"])

    assert code == 0
    stats = json.loads((task_dir / "out" / "stats.json").read_text())
    assert stats["files"] == ["a.csv", "b.csv"]
    assert stats["columns"]["square"] == {"count": 4, "mean": 3.5, "min": 0.0, "max": 9.0}
    assert "name" not in stats["columns"]
    assert (scratch / "inputs" / "table" / "more" / "b.csv").exists()
    report = report_of(task_dir, "stats", attempt=2)
    assert report.processes == 1 and not report.failed and report.oom_kills == 0
    assert report.completed is True and report.per_worker_gb == 0.1 and report.cpu_seconds > 0
    assert report.peak_memory_bytes is not None


def test_csv_stats_of_a_split_tasks_outputs_counts_each_unit_once_from_its_results_table(
    store: Path, tmp_path: Path, harness_env
) -> None:
    from harness.config import TaskPaths
    from harness.examples.ising import TASK_TYPE as ISING
    from harness.examples.ising import IsingSettings
    from harness.merge import run_merge
    from harness.worker import run_worker

    settings = IsingSettings(size=4, points=3, sweeps=10)
    sweep = make_task(store, "ising", settings.model_dump(), task="sweep")
    paths = TaskPaths(task_dir=sweep, store=store, scratch=tmp_path)
    options = {"cores": 1, "memory_bytes": None, "base_gb": 0.1, "per_worker_gb": 0.1}
    run_worker(ISING, settings, paths, "sweep-w0", coordinator=True, **options)
    run_merge(ISING, settings, paths)
    assert {"ising.csv", "results.csv"} <= {p.name for p in (sweep / "out").iterdir()}
    task_dir = make_task(store, "csv-stats", {}, task="stats", kind="plugin")
    harness_env(
        SIMRUN_TASK_DIR=str(task_dir),
        SIMRUN_INPUTS="table=runs/r1/tasks/sweep/out",
        SIMRUN_SCRATCH=str(tmp_path / "scratch"),
    )

    assert execute.main(["python", "-m", "harness.examples.csv_stats", "--port", "table"]) == 0

    stats = json.loads((task_dir / "out" / "stats.json").read_text())
    assert stats["files"] == ["results.csv"]
    assert stats["columns"]["energy"]["count"] == 3 == stats["columns"]["unit"]["count"]


def test_the_command_runs_in_scratch_with_single_threaded_blas_and_simrun_out(
    store: Path, tmp_path: Path, harness_env
) -> None:
    task_dir = make_task(store, "csv-stats", {}, task="show", kind="plugin")
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_SCRATCH=str(tmp_path / "scratch"))

    assert execute.main(["--", "python3", "-c", SHOW_ENV, *THREAD_VARIABLES]) == 0

    seen = json.loads((task_dir / "out" / "env.json").read_text())
    assert seen["cwd"] == str(tmp_path / "scratch")
    assert seen["python"] == sys.executable  # the harness's interpreter, with its sources
    assert seen["env"] == {
        **dict.fromkeys(THREAD_VARIABLES, "1"),
        "SIMRUN_OUT": str(task_dir / "out"),
    }


def _run(store: Path, tmp_path: Path, harness_env, *command: str, **env: str) -> tuple[int, Path]:
    task_dir = make_task(store, "csv-stats", {}, task="cmd", kind="plugin")
    harness_env(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_SCRATCH=str(tmp_path / "s"), **env)
    return execute.main(list(command)), task_dir


@pytest.mark.parametrize(("after", "note"), [("1", True), ("0", False)])
def test_an_attempt_after_a_kill_for_memory_says_so_in_its_termination_message(
    store: Path,
    tmp_path: Path,
    harness_env,
    monkeypatch: pytest.MonkeyPatch,
    after: str,
    note: bool,
) -> None:
    termination = tmp_path / "termination-log"
    monkeypatch.setattr("harness.lifecycle.TERMINATION_LOG", str(termination))

    code, _ = _run(
        store,
        tmp_path,
        harness_env,
        "true",
        SIMRUN_AFTER_MEMORY_KILL=after,
        SIMRUN_MEMORY_LIMIT_GB="4.5",
    )

    assert code == 0
    expected = "simrun: the retry memory after a kill for memory (4.5 GiB)"
    assert (termination.read_text() if termination.exists() else "") == (expected if note else "")


def test_a_termination_message_that_cannot_be_written_is_left_unwritten(tmp_path: Path) -> None:
    note_retry_memory({"SIMRUN_AFTER_MEMORY_KILL": "1"}, str(tmp_path / "no" / "such" / "log"))

    assert not (tmp_path / "no").exists()


def test_a_command_that_fails_exits_3_and_its_report_says_failed(
    store: Path, tmp_path: Path, harness_env
) -> None:
    code, task_dir = _run(store, tmp_path, harness_env, "python", "-c", "raise SystemExit(2)")

    assert code == 3
    assert report_of(task_dir, "cmd").failed and not report_of(task_dir, "cmd").completed


def test_a_command_that_exits_137_exits_137_and_is_no_failure(
    store: Path, tmp_path: Path, harness_env
) -> None:
    code, task_dir = _run(store, tmp_path, harness_env, "sh", "-c", "exit 137")

    assert code == 137
    report = report_of(task_dir, "cmd")
    assert not report.failed and report.oom_kills == 0


def test_a_command_that_cannot_start_is_a_configuration_error_without_a_report(
    store: Path, tmp_path: Path, harness_env, caplog
) -> None:
    code, task_dir = _run(store, tmp_path, harness_env, "no-such-program-here")

    assert code == 4
    assert "no-such-program-here cannot be started" in caplog.text
    assert not (task_dir / "workers").exists()


def test_simrun_exec_without_a_command_exits_4(harness_env) -> None:
    harness_env()

    assert execute.main([]) == 4


def test_a_missing_input_is_a_configuration_error(
    store: Path, tmp_path: Path, harness_env, caplog
) -> None:
    code, _ = _run(store, tmp_path, harness_env, "true", SIMRUN_INPUTS="table=runs/r0/out")

    assert code == 4
    assert "does not exist" in caplog.text


@pytest.fixture
def full_scratch(tmp_path: Path):
    """A real scratch disk of 64 KiB (a tmpfs mounted by root), umounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small scratch disk needs root, as CI has")
    scratch = tmp_path / "s"
    scratch.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(scratch)], check=True)
    yield scratch
    subprocess.run(["umount", "-l", str(scratch)], check=False)


def test_a_full_scratch_disk_while_inputs_are_staged_exits_75_to_be_retried(
    store: Path, tmp_path: Path, harness_env, full_scratch: Path, caplog
) -> None:
    (_upstream(store) / "big.dat").write_bytes(os.urandom(512 * 1024))

    code, _ = _run(
        store, tmp_path, harness_env, "true", SIMRUN_INPUTS="table=runs/r1/tasks/sweep/out"
    )

    assert code == 75
    assert "the store failed while the inputs were staged" in caplog.text


@pytest.mark.parametrize("fault", [errno.EIO, errno.ESTALE, errno.EDQUOT, errno.EROFS])
def test_a_storage_error_while_inputs_are_staged_exits_75(
    store: Path, tmp_path: Path, harness_env, monkeypatch, fault: int
) -> None:
    _upstream(store)

    def failing(*args: object, **kwargs: object) -> None:
        raise OSError(fault, os.strerror(fault))

    monkeypatch.setattr(shutil, "copyfileobj", failing)  # beneath stage: a real disk's errno

    code, _ = _run(
        store, tmp_path, harness_env, "true", SIMRUN_INPUTS="table=runs/r1/tasks/sweep/out"
    )

    assert code == 75


TRAP = (
    "import signal, sys, time, pathlib\n"
    "def stop(*_):\n"
    "    pathlib.Path('got-sigterm').write_text('yes')\n"
    "    sys.exit({code})\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "pathlib.Path('handler-installed').write_text('')\n"
    "time.sleep(60)"
)


@pytest.mark.parametrize("code", [1, 0])
def test_a_sigterm_is_passed_on_to_the_command_and_the_exec_exits_143_whatever_it_returns(
    store: Path, tmp_path: Path, logs: Path, code: int
) -> None:
    task_dir = make_task(store, "csv-stats", {}, task="trap", kind="plugin")
    scratch = tmp_path / "scratch"
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_SCRATCH=str(scratch))
    process = spawn("exec", env, logs / "exec.log", "python", "-c", TRAP.format(code=code))
    # A file only the command writes, once its handler is in place (the harness's own
    # "started …" line quotes the command, so no word of it is a signal).
    wait_for(lambda: (scratch / "handler-installed").exists(), 30, "the command's handler")

    os.kill(process.pid, signal.SIGTERM)

    # A command that checkpoints and exits 0 on SIGTERM has not finished its task.
    assert finish(process, logs / "exec.log") == 143
    assert (scratch / "got-sigterm").read_text() == "yes"
    report = report_of(task_dir, "trap")
    assert not report.failed and report.seconds > 0
