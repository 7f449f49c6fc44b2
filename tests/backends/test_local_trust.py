"""What a task plants in its run's directory never makes the service (root) write, read or
stall where it points, its processes do not pile up, and it sees no other user's run ids.

As root with task users, as ``simrun serve`` runs in a deployment (issue 27): each test is an
attack a command task makes, and the real service refuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runs.backends.local.submissions import read_json
from runs.control import locks
from tests.backends import test_local_isolation as isolation
from tests.backends.local_fixtures import ended, log_of, phase, read_log, shell, stepping, submit
from tests.polling import wait_for

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="changing users needs root"),
]
home = isolation.home
backend = isolation.backend


def root_only(path: Path, text: str = "untouched\n") -> Path:
    """A file only root reads and writes."""
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_links_planted_in_a_later_tasks_logs_and_workers_are_never_written_through(
    backend, home, owner
):
    victim = root_only(home.parent / "victim")
    victim_dir = home.parent / "victim-dir"
    victim_dir.mkdir(mode=0o700)
    plant = [
        'q="$SIMRUN_TASK_DIR/../q"',
        'mkdir -p "$q/logs"',
        *(f'ln -s {victim} "$q/logs/q-0.{suffix}"' for suffix in ("log", "pid", "exit")),
        f'ln -s {victim_dir} "$q/workers"',
    ]
    # A task's run folder beside its own is read-only to it as root (shm.fence): what it
    # cannot plant there the test plants while it waits, as a task could where it may.
    tried = " ; ".join(plant[:1] + [f"{step} 2>/dev/null" for step in plant[1:]])
    wait = 'until [ -e "$SIMRUN_TASK_DIR/go" ]; do sleep 0.05; done'
    q = backend.store / "runs" / "planted" / "tasks" / "q"
    with stepping(backend):
        submit(
            backend,
            "planted",
            {
                "p": {"command": shell(f"{tried} ; {wait}")},
                "q": {"command": shell("echo q ran"), "inputs": {"x": "p"}},
            },
            owner=owner.id,
        )
        wait_for(lambda: phase(backend, "planted", "p") == "Running", what="p to run")
        uid = isolation.UID_BASE + owner.id
        (q / "logs").mkdir(parents=True, exist_ok=True)
        links = [(q / "logs" / f"q-0.{suffix}", victim) for suffix in ("log", "pid", "exit")]
        for link, target in [*links, (q / "workers", victim_dir)]:
            if not link.is_symlink():
                link.symlink_to(target)
            os.lchown(link, uid, uid)  # the task user's, as its plant would be
        os.chown(q / "logs", uid, uid)
        (backend.store / "runs" / "planted" / "tasks" / "p" / "go").touch()
        wait_for(lambda: ended(backend, "planted"), what="the run")
    assert victim.read_text() == "untouched\n"
    assert list(victim_dir.iterdir()) == []
    assert phase(backend, "planted") == "Succeeded", read_log(backend, "planted", "q", "q")
    assert "q ran" in read_log(backend, "planted", "q", "q")
    logs = log_of(backend, "planted", "q", "q").parent
    assert not logs.is_symlink() and logs.stat().st_uid == 0


def test_a_hard_link_to_a_root_only_file_in_the_run_s_folder_is_never_given_to_the_task(
    backend, home, owner
):
    # As a task makes it where fs.protected_hardlinks is 0: the test (root) links the file
    # into task p's folder while p waits, then q's start hands the run's folder to the user.
    victim = root_only(home.parent / "victim")
    folder = backend.store / "runs" / "linked" / "tasks" / "p"
    with stepping(backend):
        submit(
            backend,
            "linked",
            {
                "p": {"command": shell('until [ -e "$SIMRUN_TASK_DIR/go" ]; do sleep 0.05; done')},
                "q": {"command": shell("echo q ran"), "inputs": {"x": "p"}},
            },
            owner=owner.id,
        )
        wait_for(lambda: phase(backend, "linked", "p") == "Running", what="p to run")
        os.link(victim, folder / "hard")
        (folder / "go").touch()
        wait_for(lambda: ended(backend, "linked"), what="the run")

    status = victim.stat()
    assert (status.st_uid, status.st_gid, status.st_mode & 0o777) == (0, 0, 0o600)
    assert phase(backend, "linked") == "Succeeded", read_log(backend, "linked", "q", "q")


def test_an_input_linked_to_a_root_only_folder_is_not_staged(backend, home, owner):
    secret = home.parent / "secret-dir"
    secret.mkdir(mode=0o700)
    root_only(secret / "file", "top secret\n")
    with stepping(backend):
        submit(
            backend,
            "staged",
            {
                "a": {"command": shell(f'rm -rf "$SIMRUN_OUT" && ln -s {secret} "$SIMRUN_OUT"')},
                "b": {"command": shell("cat inputs/x/file"), "inputs": {"x": "a"}},
            },
            owner=owner.id,
        )
        wait_for(lambda: ended(backend, "staged"), what="the run")
    assert "top secret" not in read_log(backend, "staged", "b", "b")
    assert phase(backend, "staged", "b") == "Failed"


def zombies_of(parent: int) -> int:
    """The zombies whose parent is ``parent``."""
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == parent:
            count += 1
    return count


def test_three_hundred_orphans_that_exit_leave_no_zombie_while_the_task_runs(backend, home, owner):
    go = home / "go"  # the service's home: a task's /tmp is its own
    script = (
        "i=0; while [ $i -lt 300 ]; do (/bin/true &); i=$((i+1)); done; "
        'touch "$SIMRUN_OUT/ready"; '
        f"until [ -e {go} ]; do sleep 0.05; done"
    )
    with stepping(backend):
        submit(backend, "orphans", {"t": {"command": shell(script)}}, owner=owner.id)
        ready = backend.store / "runs" / "orphans" / "tasks" / "t" / "out" / "ready"
        wait_for(ready.exists, what="the orphans to be made")
        pid_file = log_of(backend, "orphans", "t", "t").with_suffix(".pid")
        launcher = (read_json(pid_file) or {})["launcher"]
        wait_for(lambda: zombies_of(launcher) == 0, timeout_s=10, what="the orphans reaped")
        assert phase(backend, "orphans") == "Running"
        go.touch()
        wait_for(lambda: ended(backend, "orphans"), what="the run")
    assert phase(backend, "orphans") == "Succeeded"


SPAWN = """
import subprocess
started = []
for _ in range(60):
    try:
        started.append(subprocess.Popen(["sleep", "300"]))
    except OSError as error:
        print("refused", error.errno)
        break
print("started", len(started))
"""


@pytest.mark.parametrize("how", ["cgroup", "rlimit"])
def test_a_task_cannot_start_more_processes_than_its_pids_limit(backend, home, owner, how):
    backend.pids_max = 20
    if how == "rlimit":
        backend.pids_parent = None
    with stepping(backend):
        submit(backend, "bomb", {"t": {"command": ["python3", "-c", SPAWN]}}, owner=owner.id)
        wait_for(lambda: ended(backend, "bomb"), what="the run")
    lines = read_log(backend, "bomb", "t", "t").splitlines()
    assert lines[0].startswith("refused"), lines
    assert 5 <= int(lines[-1].split()[1]) < 20


def test_a_task_sees_no_other_users_run_id_in_locks_or_process_titles(
    backend, home, owner, stranger, settings
):
    from runs.models import Run

    settings.SIMRUN_HOME = home
    settings.SIMRUN_LOCK_URL = ""
    alice_run = Run.objects.create(owner=owner, spec={}, backend="local")
    mallory_run = Run.objects.create(owner=stranger, spec={}, backend="local")
    go = home / "go"  # the service's home: a task's /tmp is its own
    look = "; ".join(
        [
            f"ls -a {home / 'locks'} 2>&1",
            f"ls -aR {backend.store / 'local'} 2>&1",
            "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '",
        ]
    )
    with locks.hold(f"submit-{alice_run.id}"), stepping(backend):
        wait = f'touch "$SIMRUN_OUT/ready"; until [ -e {go} ]; do sleep 0.05; done'
        submit(backend, alice_run.id, {"t": {"command": shell(wait)}}, owner=owner.id)
        ready = backend.store / "runs" / alice_run.id / "tasks" / "t" / "out" / "ready"
        wait_for(ready.exists, what="alice's task to run")
        submit(backend, mallory_run.id, {"look": {"command": shell(look)}}, owner=stranger.id)
        wait_for(lambda: ended(backend, mallory_run.id), what="mallory's run")
        go.touch()
    seen = read_log(backend, mallory_run.id, "look", "look")
    assert "Permission denied" in seen
    assert str(alice_run.id) not in seen, [line for line in seen.split() if alice_run.id in line]
    assert "simrun" in seen  # the launchers were read
