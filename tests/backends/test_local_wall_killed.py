"""Nothing outlives its wall, even a wall killed outright (a crash of the service, a kill of
the wall for memory, a restart): what its process left running beyond its session (a double
fork and ``setsid``) is still in the wall's cgroups, and the next wall to start, or the local
backend's step, kills it there and removes them (``wall.sweep``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runs.backends.local import cgroups, wall
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")

DAEMON = (
    'setsid sh -c "echo \\$\\$ > {pid}.tmp; mv {pid}.tmp {pid}; exec sleep 600" & '
    "until [ -e {pid} ]; do sleep 0.05; done; exec sleep 600"
)
"""A process that leaves a daemon in a session of its own (its pid in ``{pid}``), then waits."""


def walled(argv: list[str], folder: Path) -> wall.Spec:
    limits = wall.Limits(memory_bytes=256 << 20, pids_max=64, timeout_s=300)
    return wall.Spec(argv, {"PATH": "/usr/bin:/bin"}, str(folder), None, limits, [str(folder)])


def runs(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def parents() -> list[Path | None]:
    """Where the walls make their cgroups (as ``wall._cgroups``)."""
    hierarchy = cgroups.detect()
    return [None if hierarchy is None else hierarchy.parent, cgroups.detect_pids()]


def wall_cgroups(pid: int) -> list[Path]:
    return [c for p in parents() if p is not None for c in p.glob(f"wall-{pid}-*")]


def killed_outright(folder: Path) -> tuple[int, int]:
    """Start a wall whose process leaves a daemon, then SIGKILL the wall: (the wall's pid,
    the daemon's pid), the daemon left running in the wall's cgroups."""
    pid_file = folder / "daemon.pid"
    walled_process = wall.start(walled(["sh", "-c", DAEMON.format(pid=pid_file)], folder))
    wait_for(pid_file.exists, 30, "the daemon's pid")
    walled_process.process.kill()
    walled_process.process.wait()
    daemon = int(pid_file.read_text())
    assert runs(daemon), "the wall's subreaper and session kill no longer ran: the hole is real"
    assert wall_cgroups(walled_process.process.pid), "the wall's cgroups stay"
    return walled_process.process.pid, daemon


def test_the_next_wall_kills_what_a_wall_killed_outright_left_and_removes_its_cgroups(
    tmp_path,
) -> None:
    killed, daemon = killed_outright(tmp_path)

    ended = wall.run(walled(["true"], tmp_path))

    assert ended.returncode == 0
    wait_for(lambda: not runs(daemon), 30, "the daemon's end")
    assert not wall_cgroups(killed)


def test_the_steps_sweep_kills_what_a_wall_killed_outright_left(tmp_path) -> None:
    """As the local backend's step does at each pass (the first at the service's start)."""
    killed, daemon = killed_outright(tmp_path)

    assert wall.sweep(parents()) >= 1

    wait_for(lambda: not runs(daemon), 30, "the daemon's end")
    assert not wall_cgroups(killed)


def test_the_sweep_leaves_a_running_walls_process_alone(tmp_path) -> None:
    pid_file = tmp_path / "daemon.pid"
    running = wall.start(walled(["sh", "-c", DAEMON.format(pid=pid_file)], tmp_path))
    try:
        wait_for(pid_file.exists, 30, "the daemon's pid")
        daemon = int(pid_file.read_text())

        wall.sweep(parents())

        assert runs(daemon)
        assert wall_cgroups(running.process.pid)
    finally:
        running.stop()
    assert running.wait().stopped == wall.STOPPED_SIGNAL
    assert not runs(daemon)
    assert not wall_cgroups(running.process.pid)


def test_a_cgroup_is_a_dead_walls_only_while_no_process_runs_with_its_pid_and_start() -> None:
    mine = wall.cgroup_name(os.getpid())
    assert not wall._orphaned(mine)
    assert wall._orphaned(mine.rpartition("-")[0] + "-1")  # the pid reused since
    assert not wall._orphaned(f"wall-{os.getpid()}")  # an older wall's name, its pid runs
    assert wall._orphaned(f"wall-{2**22 + 1}-5")  # no such pid
    assert not wall._orphaned("probe-12")
