"""Everything a task user can write is counted or gone with the task (issue 45).

As root with task users: alice's earlier run has ended, her packages' venv and wheel cache
were built, and another of her runs is live; then a task of hers walks the whole machine as
it sees it and names every folder and file it may write. Each must be inside what its own
budget counts (its task folder, its scratch) or on a tmpfs of its own (``/tmp``, ``/var/tmp``,
``/dev/shm``, ``/run/lock``), gone with it: never the owner's ended runs, another live run of
hers, her venvs or her wheel cache, which no budget counts and which outlive the task.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from runs.backends.local import builds, wall
from runs.backends.local import env as local_env
from runs.backends.local.backend import LocalBackend
from tests.backends.local_fixtures import ended, phase, read_log, shell, stepping, submit
from tests.backends.packages import pip_index
from tests.polling import wait_for

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="changing users needs root"),
]
UID_BASE = 350000
OWNER = 5
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
"""The machine's folders every user may write, each a tmpfs of the task's own."""


def walk(*known: Path) -> list[str]:
    """A command that names every folder and file it may write below ``/`` and below the
    ``known`` paths (an owner knows the names of her runs and venvs: a folder that cannot be
    listed is no wall)."""
    roots = " ".join(["/", *map(str, known)])
    return shell(
        f"find {roots} \\( -path /proc -o -path /sys \\) -prune -o \\( -type d -o -type f \\) "
        "-writable -print 2>/dev/null; echo WALKED"
    )


def test_a_task_can_write_only_what_its_budget_counts_or_what_goes_with_it(
    team_folder, monkeypatch
) -> None:
    pip_index(team_folder / "index", monkeypatch)
    store, scratch = team_folder / "store", team_folder / "scratch"
    backend = LocalBackend(store, scratch, cores=2, memory_gb=8, grace_s=1, task_uid_base=UID_BASE)
    flag = team_folder / "release"
    with stepping(backend):
        submit(backend, "earlier", {"old": {"command": ["true"]}}, packages=["pkgdemo"],
               owner=OWNER)  # fmt: skip
        wait_for(lambda: ended(backend, "earlier"), timeout_s=120, what="the earlier run")
        assert phase(backend, "earlier") == "Succeeded", read_log(backend, "earlier", "old", "old")
        live = shell(f"until [ -e {flag} ]; do sleep 0.05; done")
        submit(backend, "live", {"wait": {"command": live}}, owner=OWNER)
        environments = store / local_env.ENVIRONMENTS
        (venv,) = (p for p in environments.iterdir() if p.is_dir() and p.name != local_env.CACHE)
        known = [
            store / "runs" / "earlier",
            store / "runs" / "live",
            scratch / "live" / "wait-0",
            venv,
        ]
        known += [environments / local_env.CACHE / str(UID_BASE + OWNER), environments]
        known += [store / "runs" / "walk"]
        submit(backend, "walk", {"probe": {"command": walk(*known)}}, packages=["pkgdemo"],
               owner=OWNER)  # fmt: skip
        wait_for(lambda: ended(backend, "walk"), timeout_s=300, what="the walk")
        flag.touch()
        wait_for(lambda: ended(backend, "live"), timeout_s=60, what="the live run")
    log = read_log(backend, "walk", "probe", "probe")
    assert phase(backend, "walk") == "Succeeded" and "WALKED" in log, log
    written = [line for line in log.splitlines() if line.startswith("/")]
    own = [store / "runs" / "walk" / "tasks" / "probe", scratch / "walk" / "probe-0"]
    kept = [path for path in known if scratch not in path.parents]
    assert all(path.is_dir() for path in kept), kept  # there to be written

    def allowed(path: str) -> bool:
        found = Path(path)
        if any(found == mine or mine in found.parents for mine in own):
            return True
        if path in PRIVATE:
            return True
        machine = found not in team_folder.parents and team_folder not in found.parents
        return machine and any(path.startswith(p + "/") for p in PRIVATE)

    assert "\n".join(path for path in written if not allowed(path)) == ""
    assert any(path.startswith(str(own[0])) for path in written)  # the walk saw its own


def test_a_build_can_write_only_the_folders_its_budget_counts(tmp_path) -> None:
    """A build (or a learning) behind its wall, as the owner's task user, may write its venv
    and its wheel cache, which its wall counts, and nothing else of the store: not her ended
    run's folder nor another venv of hers, both hers by their owner."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # a folder the task users may cross
    try:
        base.chmod(0o755)
        store = base / "store"
        ended_run = store / "runs" / "earlier" / "tasks" / "t" / "out"
        environments = store / local_env.ENVIRONMENTS
        venv, other, cache = environments / "building", environments / "other", environments / "c"
        for folder in (ended_run, venv, other, cache):
            folder.mkdir(parents=True)
        for folder in [*ended_run.parents, venv, other, cache]:
            if store in folder.parents:
                os.chown(folder, UID_BASE + OWNER, UID_BASE + OWNER)
        builder = builds.Builder(
            env=builds.build_env(venv),
            uid=UID_BASE + OWNER,
            gid=UID_BASE + OWNER,
            keep=(str(store),),
            fenced=(str(store),),
        )
        argv = ["find", str(store), "-writable", "-print"]
        with tempfile.TemporaryFile() as out:
            ended_as = wall.run(builder.walled(argv, venv, 60, counted=(cache,)), stdout=out)
            out.seek(0)
            written = out.read().decode().split()
        assert ended_as.returncode == 0, ended_as
        assert sorted(written) == sorted(map(str, (venv, cache)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
