"""A command task's inputs staged on a failing disk: the launcher exits 75 as the harness does,
and the attempt is retried (an eviction), not failed (exit 4)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.backends.local.backend import LocalBackend, workflow_name
from tests.backends.local_fixtures import ended, phase, shell, stepping, submit
from tests.polling import wait_for

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root, as CI has"),
]


@pytest.fixture
def small_scratch() -> Iterator[Path]:
    """A home in /tmp (task users cross it) whose scratch is a 256 KiB disk of its own."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    scratch = base / "scratch"
    scratch.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(scratch)]
    subprocess.run(mount, check=True)
    try:
        yield scratch
    finally:
        subprocess.run(["umount", "-l", str(scratch)], check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("task_uid_base", [None, 350000], ids=["as-the-service", "as-task-user"])
def test_staging_a_commands_inputs_on_a_full_disk_exits_75_and_is_retried(
    small_scratch: Path, task_uid_base: int | None
) -> None:
    backend = LocalBackend(
        small_scratch.parent / "store",
        small_scratch,
        cores=2,
        memory_gb=8,
        task_uid_base=task_uid_base,
    )
    tasks = {
        "data": {"command": shell('head -c 1048576 /dev/zero > "$SIMRUN_OUT/big"')},
        "use": {"command": ["wc", "-c", "inputs/big/big"], "inputs": {"big": "data"}},
    }
    exit_file = backend.store / "runs" / "s1" / "tasks" / "use" / "logs" / "use-0.exit"
    with stepping(backend):
        submit(backend, "s1", tasks, owner=3)
        wait_for(exit_file.exists, timeout_s=120, what="the first staging to end")
        # The disk is given room: the retry stages the inputs and runs.
        remount = ["mount", "-o", "remount,size=16m", str(small_scratch)]
        subprocess.run(remount, check=True)
        wait_for(lambda: ended(backend, "s1"), timeout_s=120, what="the run")
    status = backend.status(workflow_name("s1"))
    assert phase(backend, "s1") == "Succeeded", status
    first = status.failed["use"][0]
    assert (first.attempt, first.exit_code, first.evicted) == (0, 75, True)
    assert "No space left on device" in first.message
