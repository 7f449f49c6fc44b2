"""The packages of a run's environment on the local backend: installed once per content into
a venv on the service's packages, shared by the runs naming them, the install in the log of
the process it prepares, a failure with pip's last lines, bounded in time, log and count."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runs.backends.local import builds
from runs.backends.local import env as local_env
from runs.backends.local import user as local_user
from runs.backends.local.backend import LocalBackend, workflow_name
from tests.backends.local_fixtures import ended, phase, read_log, stepping, submit
from tests.backends.packages import pip_index, write_sdist, write_wheel
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "store", tmp_path / "scratch", cores=2, memory_gb=8)


def install(store: Path, *packages: str, **limits: float) -> local_env.Install:
    return local_env.Install(
        store=store, packages=packages, timeout_s=120, pip_env=local_env.pip_env(), **limits
    )


ANSWER = ["python", "-c", "import pkgdemo, sys; print('answer', pkgdemo.ANSWER, sys.prefix)"]


def test_the_packages_of_a_run_are_installed_once_and_shared_by_the_runs_naming_them(
    backend, index
) -> None:
    with stepping(backend):
        submit(backend, "p1", {"use": {"command": ANSWER}}, packages=["pkgdemo"])
        wait_for(lambda: ended(backend, "p1"), timeout_s=120, what="the first run")
        # The same packages in another order, or twice, are the same environment.
        submit(backend, "p2", {"use": {"command": ANSWER}}, packages=["pkgdemo", "pkgdemo"])
        wait_for(lambda: ended(backend, "p2"), timeout_s=120, what="the second run")
    first, second = (read_log(backend, run, "use", "use") for run in ("p1", "p2"))
    venv = local_env.Install(backend.store, ("pkgdemo",), 1).directory
    assert phase(backend, "p1") == phase(backend, "p2") == "Succeeded", first + second
    # The first process installs them, its log says so with pip's own output...
    assert "installing the environment's packages (pkgdemo)" in first
    assert "Successfully installed pkgdemo-0.1" in first
    assert first.splitlines()[-1] == f"answer 42 {venv}"
    # ... the second starts without an install.
    assert "installing" not in second and "installed already" in second
    assert second.splitlines()[-1] == f"answer 42 {venv}"
    # Never into the service's environment.
    assert subprocess.run([sys.executable, "-c", "import pkgdemo"]).returncode != 0


def test_a_package_pip_cannot_install_fails_the_task_with_pips_last_lines(backend, index) -> None:
    with stepping(backend):
        submit(backend, "p3", {"use": {"command": ANSWER}}, packages=["pkgdemo", "nosuch-pkg"])
        wait_for(lambda: ended(backend, "p3"), timeout_s=120, what="the run")
    status = backend.status(workflow_name("p3"))
    assert status.phase == "Failed"
    [failed] = status.failed["use"]
    assert failed.exit_code == 4  # a configuration error: not retried
    assert "installing the environment's packages (nosuch-pkg, pkgdemo) failed" in failed.message
    assert "No matching distribution found for nosuch-pkg" in failed.message
    assert "ModuleNotFoundError" not in read_log(backend, "p3", "use", "use")


def test_a_run_with_sources_sees_the_packages_of_its_environment(backend, index) -> None:
    tree = backend.store / "snapshots" / ("cd" * 32)
    write_wheel(index, "unused", {"unused.py": ""})  # pip reads the folder, not only pkgdemo
    from tests.backends.test_local_harness import snapshot

    snapshot(backend.store)
    (backend.store / "snapshots" / ("ab" * 32)).rename(tree)
    (tree / "snapdemo" / "__init__.py").write_text("import pkgdemo\nANSWER = pkgdemo.ANSWER\n")
    code = ["python", "-c", "import snapdemo; print('answer', snapdemo.ANSWER)"]
    with stepping(backend):
        submit(backend, "p4", {"use": {"command": code}}, packages=["pkgdemo"], sources=["cd" * 32])
        wait_for(lambda: ended(backend, "p4"), timeout_s=180, what="the run")
    log = read_log(backend, "p4", "use", "use")
    assert phase(backend, "p4") == "Succeeded", log
    assert log.splitlines()[-1] == "answer 42"


def test_a_split_task_runs_the_harness_of_the_packages_venv(backend, index, tmp_path) -> None:
    from tests.backends.test_local_harness import write_task_files

    tasks = {"sq": {"kind": "split", "type": "squares", "settings": {"n": 2}}}
    write_task_files(backend, "p5", tasks, {})
    with stepping(backend):
        submit(backend, "p5", tasks, packages=["pkgdemo"])
        wait_for(lambda: ended(backend, "p5"), timeout_s=120, what="the run")
    log = read_log(backend, "p5", "sq", "sq-w0")
    assert phase(backend, "p5") == "Succeeded", log
    assert "installing the environment's packages (pkgdemo)" in log


def test_a_second_build_of_the_same_packages_takes_their_wheels_from_the_cache(
    tmp_path, index
) -> None:
    builds = tmp_path / "store" / "builds"  # the store stays visible behind the wall
    write_sdist(index, "slowbuild", builds)
    python, lock = local_env.ensure_packages(install(tmp_path / "store", "slowbuild"))
    lock.close()
    assert subprocess.run([python, "-c", "import slowbuild"]).returncode == 0
    # Other packages with it are another venv: its wheel comes from the cache, not a build.
    python, lock = local_env.ensure_packages(install(tmp_path / "store", "slowbuild", "pkgdemo"))
    lock.close()
    assert subprocess.run([python, "-c", "import slowbuild, pkgdemo"]).returncode == 0
    assert builds.read_text() == "built\n"


def test_an_install_past_its_time_limit_is_stopped_and_says_so(tmp_path, index, capfd) -> None:
    write_sdist(index, "hangs", tmp_path / "store" / "builds", sleep_s=600)
    slow = local_env.Install(
        tmp_path / "store", ("hangs",), timeout_s=2, pip_env=local_env.pip_env()
    )
    with pytest.raises(local_env.PackagesError) as error:
        local_env.ensure_packages(slow)
    assert "took longer than 2 s (SIMRUN_PACKAGES_TIMEOUT_S)" in str(error.value)
    assert "hangs" in str(error.value)
    gone = subprocess.run(["pgrep", "-f", str(tmp_path / "store" / "builds")], capture_output=True)
    assert gone.stdout == b""  # the build and its children were killed


def test_whoever_waited_for_a_build_that_failed_fails_with_it(tmp_path, index) -> None:
    failing = install(tmp_path / "store", "pkgdemo")
    folder = tmp_path / "store" / local_env.ENVIRONMENTS
    folder.mkdir(parents=True)
    failed = folder / f"{failing.key}.failed"
    message = "installing the environment's packages (pkgdemo) failed: pip exited 1"
    failed.write_text(message)
    # Recorded after this one asked (by the build it waited for): its failure, no build.
    os.utime(failed, (time.time() + 60, time.time() + 60))
    with pytest.raises(local_env.PackagesError) as error:
        local_env.ensure_packages(failing)
    assert str(error.value) == message
    assert not failing.directory.exists()
    # Recorded before it asked: a failure of the past, built again (the index may be back).
    os.utime(failed, (time.time() - 60, time.time() - 60))
    _, lock = local_env.ensure_packages(failing)
    lock.close()
    assert not failed.exists()


def test_pips_output_in_the_log_is_bounded(tmp_path, index, monkeypatch, capfd) -> None:
    monkeypatch.setattr(builds, "PIP_OUTPUT_CAP", 100)
    _, lock = local_env.ensure_packages(install(tmp_path / "store", "pkgdemo"))
    lock.close()
    out = capfd.readouterr().out
    pips = out.split("\n", 1)[1].split("(the log keeps")[0]
    assert len(pips.encode()) <= 101 and "Successfully installed" not in pips
    assert "(the log keeps the first 0 KiB of pip's output)" in out
    assert out.splitlines()[-1].startswith("installed the environment's packages in")


def test_the_venvs_beyond_those_kept_go_but_not_one_in_use(tmp_path, index) -> None:
    write_wheel(index, "other", {"other.py": ""})
    write_wheel(index, "third", {"third.py": ""})
    store = tmp_path / "store"
    kept = {"kept": 1}
    _, in_use = local_env.ensure_packages(install(store, "pkgdemo", **kept))
    _, lock = local_env.ensure_packages(install(store, "other", **kept))
    lock.close()
    # pkgdemo's venv is in use (its lock held): kept beyond the limit; other's is not.
    assert install(store, "pkgdemo").directory.is_dir()
    assert install(store, "other").directory.is_dir()
    in_use.close()
    _, lock = local_env.ensure_packages(install(store, "third", **kept))
    lock.close()
    left = sorted(p.name for p in (store / local_env.ENVIRONMENTS).glob("*.json"))
    assert left == [f"{install(store, 'third').key}.json"]
    assert not install(store, "pkgdemo").directory.exists()
    assert not install(store, "other").directory.exists()


def test_the_wheel_cache_over_its_budget_is_emptied(tmp_path, index) -> None:
    write_sdist(index, "slowbuild", tmp_path / "store" / "builds")
    _, lock = local_env.ensure_packages(install(tmp_path / "store", "slowbuild", cache_gb=1e-9))
    lock.close()
    cache = tmp_path / "store" / local_env.ENVIRONMENTS / local_env.CACHE / "service"
    assert cache.is_dir() and not list(cache.iterdir())
    mark = tmp_path / "store" / local_env.ENVIRONMENTS
    assert json.loads(next(mark.glob("*.json")).read_text())["packages"] == ["slowbuild"]


@pytest.mark.skipif(os.geteuid() != 0, reason="changing users needs root")
def test_on_a_team_serve_the_packages_are_built_as_the_owners_task_user(monkeypatch) -> None:
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # a folder the task users may cross
    base.chmod(0o755)
    pip_index(base / "index", monkeypatch)
    uid = 320000 + 7
    try:
        backend = LocalBackend(
            base / "store", base / "scratch", cores=2, memory_gb=8, task_uid_base=320000
        )
        with stepping(backend):
            submit(backend, "p6", {"use": {"command": ANSWER}}, packages=["pkgdemo"], owner=7)
            wait_for(lambda: ended(backend, "p6"), timeout_s=120, what="the run")
        log = read_log(backend, "p6", "use", "use")
        problem = local_user.unreachable(Path(sys.executable).resolve())
        if problem is not None:  # this Python is out of the task users' reach: said at once
            assert phase(backend, "p6") == "Failed" and problem in log
            return
        assert phase(backend, "p6") == "Succeeded", log
        venv = local_env.Install(backend.store, ("pkgdemo",), 1, uid=uid).directory
        assert log.splitlines()[-1] == f"answer 42 {venv}"
        cache = backend.store / local_env.ENVIRONMENTS / local_env.CACHE / str(uid)
        for built in (venv, venv / "bin" / "python", cache):
            assert built.lstat().st_uid == uid, built
        assert (venv.stat().st_mode & 0o777, cache.stat().st_mode & 0o777) == (0o700, 0o700)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing users needs root")
def test_one_users_installs_never_evict_anothers_venvs(team_folder, monkeypatch) -> None:
    """Each user's task user keeps SIMRUN_ENVIRONMENTS_KEPT venvs of its own: mallory's
    installs remove mallory's least recently used, never alice's."""
    index = pip_index(team_folder / "index", monkeypatch)
    write_wheel(index, "other", {"other.py": ""})
    write_wheel(index, "third", {"third.py": ""})
    store, alice, mallory = team_folder / "store", 340001, 340002

    def built(uid: int, *packages: str) -> local_env.Install:
        wanted = install(store, *packages, kept=1)
        wanted = dataclasses.replace(wanted, uid=uid, gid=uid)
        _, lock = local_env.ensure_packages(wanted)
        lock.close()
        return wanted

    alices = built(alice, "pkgdemo")
    mallorys = [built(mallory, "other"), built(mallory, "third"), built(mallory, "pkgdemo")]

    assert alices.directory.is_dir()  # alice's one venv is hers to keep
    assert [m.directory.is_dir() for m in mallorys] == [False, False, True]
