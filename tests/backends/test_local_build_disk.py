"""A build of an environment's packages writes on the store's disk only within its budget
(runs/backends/local/wall_disk.py): one file larger than it, a flood of files or of bytes in
its venv, its temporary files or its wheel cache stops the build, which fails naming the
budget, and nothing it wrote remains; a build within the budget is installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import untrusted
from runs.backends.local import env as local_env
from runs.backends.local import wall_disk
from tests.backends.packages import BACKEND, pip_index, write_sdist
from tests.floods import tmpfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="task users and cgroups need root")

UID = 330000 + 9
BUDGET = wall_disk.Disk(bytes=16 << 20, files=300, check_s=0.1)
"""A small budget: 16 MiB and 300 files and folders, counted every tenth of a second."""

FLOOD = """

def build_wheel(directory, config_settings=None, metadata_directory=None):
    where = os.path.join(os.environ[{where!r}], "flood")
    os.makedirs(where, exist_ok=True)
    for number in range({count}):
        with open(os.path.join(where, str(number)), "wb") as handle:
            handle.write(b"x" * {size})
    return built(directory, config_settings, metadata_directory)
"""
"""A build backend that writes ``count`` files of ``size`` bytes where the variable ``where``
of its environment points, then builds its wheel."""


def install(folder: Path, monkeypatch, name: str, where: str, count: int, size: int):
    """An install as the task user of a package whose build writes what ``FLOOD`` says."""
    index = pip_index(folder / "index", monkeypatch)
    seen = folder / "store" / "seen"  # the task user's, where the build counts its builds
    seen.mkdir(parents=True, exist_ok=True)
    seen.chmod(0o777)
    backend = BACKEND.format(name=name, builds=str(seen / "builds"), sleep_s=0)
    backend = backend.replace("def build_wheel(", "def built(")
    backend += FLOOD.format(where=where, count=count, size=size)
    write_sdist(index, name, seen / "builds", backend=backend)
    return local_env.Install(
        store=folder / "store",
        packages=(name,),
        timeout_s=120,
        uid=UID,
        gid=UID,
        pip_env=local_env.pip_env(),
        disk=BUDGET,
    )


def written(store: Path) -> list[str]:
    """The files a flood left anywhere in the store."""
    found = []
    for top, _, files in os.walk(store):
        if os.path.basename(top) == "flood":
            found += files
    return found


@pytest.mark.parametrize(
    ("where", "count", "size", "budget"),
    [
        ("HOME", 1, 64 << 20, "SIMRUN_BUILD_DISK_GB"),  # one file larger than the budget
        ("TMPDIR", 48, 1 << 20, "SIMRUN_BUILD_DISK_GB"),  # files each smaller, more together
        ("HOME", 2000, 0, "SIMRUN_BUILD_FILES_MAX"),  # a flood of files
        ("PIP_CACHE_DIR", 2000, 0, "SIMRUN_BUILD_FILES_MAX"),  # in its wheel cache
        ("PIP_CACHE_DIR", 48, 1 << 20, "SIMRUN_BUILD_DISK_GB"),
    ],
    ids=["one-large-file", "bytes", "files", "files-in-cache", "bytes-in-cache"],
)
def test_a_build_that_writes_past_its_budget_fails_naming_it_and_leaves_nothing(
    team_folder, monkeypatch, where, count, size, budget
) -> None:
    wanted = install(team_folder, monkeypatch, "floodbuild", where, count, size)

    with pytest.raises(local_env.PackagesError) as error:
        local_env.ensure_packages(wanted)

    assert "over its budget" in str(error.value) and budget in str(error.value), str(error.value)
    assert not wanted.directory.exists()
    assert written(wanted.store) == []
    cache = wanted.store / local_env.ENVIRONMENTS / local_env.CACHE / str(UID)
    assert untrusted.usage(cache.parent, [cache.name]).bytes < BUDGET.bytes


def test_a_build_that_writes_files_without_end_is_stopped_while_it_runs(
    team_folder, monkeypatch
) -> None:
    """Stopped by a count while it runs, not at its end: on a small filesystem of the test's
    own, whose files would run out first."""
    with tmpfs(team_folder / "store", size_mb=64, inodes=20_000):
        wanted = install(team_folder, monkeypatch, "endlessbuild", "HOME", 10**9, 0)

        with pytest.raises(local_env.PackagesError) as error:
            local_env.ensure_packages(wanted)

        assert "SIMRUN_BUILD_FILES_MAX" in str(error.value), str(error.value)
        assert not wanted.directory.exists()


def test_a_build_within_its_budget_is_installed(team_folder, monkeypatch) -> None:
    wanted = install(team_folder, monkeypatch, "smallbuild", "HOME", 20, 1 << 10)

    python, held = local_env.ensure_packages(wanted)
    held.close()

    assert python.exists()
    assert len(written(wanted.store)) == 20  # what it wrote within its budget is its own
