"""A run's environment.packages on a ``simrun serve`` of one machine, as a newcomer meets
them: a type shipped in the sources imports a package at its top, the service installs it
once (learning the type on it), and every later run of the environment starts without an
install. The numpy/scipy walk of the same is ``bench/local_packages.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.backends.local import env as local_env
from tests.backends.packages import write_wheel
from tests.e2e.service import Service, submit, wait_until_ended
from tests.e2e.test_shipped_types import run_id, simrun_submit
from tests.walkthrough import write_needy_package

pytestmark = pytest.mark.slow

SPEC = """name: needy
tasks:
  sweep: {type: needy, settings: {n: 3}}
environment: {packages: [pkgdemo]}
sources: [./needy-pkg]
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Service]:
    """A serve whose pip finds packages in a folder of the test's only (no network)."""
    base = tmp_path_factory.mktemp("packages")
    index = base / "index"
    write_wheel(index, "pkgdemo", {"pkgdemo/__init__.py": "ANSWER = 42\n"})
    write_wheel(index, "pkgother", {"pkgother.py": "TWICE = 84\n"})
    pip = {"PIP_FIND_LINKS": str(index), "PIP_NO_INDEX": "1"}
    service = Service(home=base / "home", extra_env=pip)
    service.start()
    yield service
    if service.process is not None:
        assert service.stop() == 0


def first_log(service: Service, run: str, task: str) -> str:
    return next(
        (service.store / "runs" / run / "tasks" / task / "logs").glob("*-0.log")
    ).read_text()


def test_a_shipped_type_that_imports_a_package_of_the_environment_runs_and_runs_again(
    served: Service, tmp_path: Path
) -> None:
    token = served.user("newcomer")
    write_needy_package(tmp_path)
    spec = tmp_path / "needy.yaml"
    spec.write_text(SPEC)

    first = simrun_submit(served, token, spec)

    assert first.returncode == 0, first.stdout + first.stderr
    run = run_id(first.stdout)
    out = served.store / "runs" / run / "tasks" / "sweep" / "out" / "answer.txt"
    assert out.read_text() == str(42 + 43 + 44)
    # Learning the type installed the packages; the run found them installed.
    assert "the environment's packages are installed already" in first_log(served, run, "sweep")
    [mark] = (served.store / local_env.ENVIRONMENTS).glob("*.json")
    assert json.loads(mark.read_text())["packages"] == ["pkgdemo"]
    built = mark.stat().st_mtime_ns

    second = simrun_submit(served, token, spec)

    assert second.returncode == 0, second.stdout + second.stderr
    log = first_log(served, run_id(second.stdout), "sweep")
    assert "installed already" in log and "installing" not in log
    assert mark.stat().st_mtime_ns == built  # no second install


def test_a_command_task_runs_in_the_venv_of_its_runs_packages(served: Service) -> None:
    token = served.user("commander")
    command = ["python", "-c", "import pkgdemo, pkgother; print(pkgdemo.ANSWER + pkgother.TWICE)"]
    spec = {
        "tasks": {"sum": {"command": command}},
        "environment": {"packages": ["pkgother", "pkgdemo"]},
    }
    with served.client(token) as client:
        run = wait_until_ended(client, submit(client, spec))
    log = first_log(served, run["id"], "sum")
    assert run["state"] == "succeeded", (run["message"], log)
    assert "installing the environment's packages (pkgdemo, pkgother)" in log
    assert "Successfully installed" in log and log.splitlines()[-1] == "126"
