"""Command tasks in their image (``commands: docker``) on the local backend.

This machine has the docker client but no engine, so the engine is a stand-in ``docker`` on
the PATH that records its calls and runs the command of ``docker run`` as the container.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runs.backends.local.backend import LocalBackend, workflow_name
from tests.backends.local_fixtures import phase, plan, read_log, stepping, submit
from tests.polling import wait_for

pytestmark = pytest.mark.django_db

ENGINE = """#!/bin/sh
echo "$*" >> {calls}
case "$1" in
  version) echo 27.0.0 ;;
  run)
    shift
    while [ $# -gt 0 ]; do
      case "$1" in
        --name) name=$2; shift 2 ;;
        --memory|--memory-swap|--cpus|--volume|--workdir|--env) shift 2 ;;
        *) break ;;
      esac
    done
    shift  # the image
    echo $$ > {state}/$name.pid
    exec "$@" ;;
  kill)
    for last; do :; done
    signal=TERM; [ "$2" = "--signal" ] && signal=${{3#SIG}}
    kill -s "$signal" "$(cat {state}/$last.pid)" ;;
  inspect) echo false ;;
esac
"""


@pytest.fixture
def engine(tmp_path: Path, monkeypatch) -> Path:
    """A stand-in Docker engine first on the PATH; returns the file of its calls."""
    bin_dir, state = tmp_path / "bin", tmp_path / "engine"
    bin_dir.mkdir()
    state.mkdir()
    calls = tmp_path / "calls"
    calls.touch()
    docker = bin_dir / "docker"
    docker.write_text(ENGINE.format(calls=calls, state=state))
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls


def test_a_command_runs_in_its_image_in_a_container_named_after_run_node_and_attempt(
    tmp_path, engine
):
    backend = LocalBackend(tmp_path / "store", tmp_path / "scratch", cores=2, grace_s=2)
    tasks = {"t": {"command": ["sh", "-c", "echo in-image; sleep 60"], "image": "alpine:3"}}
    with stepping(backend):
        submit(backend, "dk1", tasks, {"t": plan(cores=2, memory_gb=0.5)}, local_commands="docker")
        wait_for(lambda: "in-image" in read_log(backend, "dk1", "t", "t"), what="the container")
        [run] = [c for c in engine.read_text().splitlines() if c.startswith("run ")]
        assert "--name simrun-dk1-t-0" in run
        assert f"--memory {2**29}b" in run and "--cpus 2" in run
        assert f"--volume {backend.store}:{backend.store}" in run
        assert "--env SIMRUN_ATTEMPT=0" in run
        assert run.endswith("alpine:3 sh -c echo in-image; sleep 60")
        backend.cancel(workflow_name("dk1"))
        wait_for(lambda: phase(backend, "dk1") == "Failed", what="the cancel")
    calls = engine.read_text().splitlines()
    assert "kill --signal SIGTERM simrun-dk1-t-0" in calls
    assert "rm --force simrun-dk1-t-0" in calls


def test_an_image_is_needed_to_run_a_command_with_docker(tmp_path, engine):
    backend = LocalBackend(tmp_path / "store", tmp_path / "scratch")
    with pytest.raises(ValueError, match="needs an image"):
        submit(backend, "dk2", {"t": {"command": ["true"]}}, local_commands="docker")


def test_kill_orphans_kills_the_container_of_an_unknown_run(tmp_path, engine):
    pid_file = tmp_path / "store/runs/gone/tasks/t/logs/t-0.pid"
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text('{"launcher": 1, "launcher_start": 0, "container": "simrun-gone-t-0"}')
    LocalBackend(tmp_path / "store", tmp_path / "scratch").kill_orphans()
    assert "kill --signal SIGKILL simrun-gone-t-0" in engine.read_text().splitlines()
    assert not pid_file.exists()
