"""A type the sources ship whose module imports a package: learned on the environment's
packages (installed as a run of them would have them), told where to install a missing one."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from runs.backends.local import env as local_env
from runs.backends.local import user as local_user
from tests.api.test_shipped_types import learned
from tests.backends.packages import pip_index
from tests.walkthrough import upload_package, write_needy_package


def needy_spec(digest: str, *packages: str) -> dict[str, object]:
    return {
        "tasks": {"sweep": {"type": "needy", "settings": {"n": 3}}},
        "sources": [digest],
        "environment": {"packages": list(packages)},
    }


def test_a_type_whose_module_imports_a_package_of_the_environment_is_learned_on_it(
    owner, owner_client, tmp_path, index
) -> None:
    digest = upload_package(owner, write_needy_package(tmp_path))
    run = learned(owner_client, needy_spec(digest, "pkgdemo"))
    assert run.state == "submitting", run.message
    assert run.tasks.get().units_total == 3


def test_a_type_whose_module_imports_a_missing_package_is_told_where_to_install_it(
    owner, owner_client, tmp_path, index
) -> None:
    digest = upload_package(owner, write_needy_package(tmp_path))
    run = learned(owner_client, needy_spec(digest))
    assert run.state == "failed"
    assert run.message == (
        "sources: the types of the sources cannot be loaded "
        "(python -m harness.describe exited 4):\n"
        "task type 'needy': its module needy_sim imports 'pkgdemo', which is not installed "
        "here: install it in `environment.packages`, or import it inside `compute`"
    )


def test_packages_that_cannot_be_installed_fail_the_run_at_environment_packages(
    owner, owner_client, tmp_path, index
) -> None:
    digest = upload_package(owner, write_needy_package(tmp_path))
    run = learned(owner_client, needy_spec(digest, "pkgdemo", "nosuch-pkg"))
    assert run.state == "failed" and run.message.startswith("environment.packages: ")
    message = run.message
    assert "installing the environment's packages (nosuch-pkg, pkgdemo) failed" in message
    assert message.endswith("ERROR: No matching distribution found for nosuch-pkg")
    assert not run.tasks.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run code as another user")
def test_as_root_the_packages_types_are_learned_on_are_built_as_the_owners_task_user(
    owner, owner_client, tmp_path, settings, monkeypatch
) -> None:
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # a store the task users may cross
    base.chmod(0o755)
    settings.SIMRUN_STORE = base / "store"
    settings.SIMRUN_TASK_UID_BASE = 330000
    pip_index(base / "index", monkeypatch)
    try:
        digest = upload_package(owner, write_needy_package(tmp_path))
        run = learned(owner_client, needy_spec(digest, "pkgdemo"))
        problem = local_user.unreachable(Path(sys.executable).resolve())
        if problem is not None:
            assert run.state == "failed" and problem in run.message
            return
        # The packages come first, as the task user (its answer is the snapshots' install,
        # which task users can do once issue 35's fix of the snapshots' mode is in).
        venvs = base / "store" / local_env.ENVIRONMENTS
        [venv] = [p for p in venvs.iterdir() if p.is_dir() and p.name != local_env.CACHE]
        assert venv.stat().st_uid == 330000 + owner.pk
    finally:
        shutil.rmtree(base, ignore_errors=True)
