"""What a pod is told: paths, cores and memory from the environment, task.json."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import config
from harness.config import cores, memory_limit, paths_from_env
from harness.errors import ConfigurationError
from harness.memory import GIB
from tests.harness.task_dirs import make_task


def test_paths_come_from_the_task_directory_in_the_store(store: Path, tmp_path: Path) -> None:
    task_dir = store / "runs" / "r1" / "tasks" / "stats"

    paths = paths_from_env(
        {
            "SIMRUN_TASK_DIR": str(task_dir),
            "SIMRUN_INPUTS": "table=runs/r1/tasks/sweep/out, raw=/data/raw",
            "SIMRUN_SCRATCH": str(tmp_path / "scratch"),
        }
    )

    assert paths.task_dir == task_dir and paths.store == store
    assert paths.inputs == {"table": store / "runs/r1/tasks/sweep/out", "raw": Path("/data/raw")}
    assert paths.scratch == tmp_path / "scratch"
    assert paths.ledger == task_dir / "units" and paths.out == task_dir / "out"


def test_the_scratch_directory_is_slash_scratch_by_default(store: Path) -> None:
    paths = paths_from_env({"SIMRUN_TASK_DIR": str(store / "runs/r/tasks/t")})

    assert paths.scratch == Path("/scratch") and paths.inputs == {}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SIMRUN_TASK_DIR is not set"),
        ({"SIMRUN_INPUTS": "table"}, "'table' is not port=path"),
        ({"SIMRUN_INPUTS": "=runs/x"}, "is not port=path"),
        ({"SIMRUN_INPUTS": "table="}, "is not port=path"),
    ],
)
def test_malformed_paths_are_configuration_errors(store: Path, env: dict, message: str) -> None:
    if env:
        env = {"SIMRUN_TASK_DIR": str(store / "runs/r/tasks/t"), **env}

    with pytest.raises(ConfigurationError, match=message):
        paths_from_env(env)


def test_a_relative_input_outside_a_store_needs_simrun_store(tmp_path: Path) -> None:
    env = {"SIMRUN_TASK_DIR": str(tmp_path / "task"), "SIMRUN_INPUTS": "t=runs/x"}
    with pytest.raises(ConfigurationError, match="not in a store"):
        paths_from_env(env)

    paths = paths_from_env({**env, "SIMRUN_STORE": str(tmp_path / "s")})

    assert paths.inputs == {"t": tmp_path / "s" / "runs/x"}


def test_cores_are_capped_by_simrun_cores() -> None:
    available = len(os.sched_getaffinity(0))

    assert cores({}) == available
    assert cores({"SIMRUN_CORES": "1"}) == 1
    assert cores({"SIMRUN_CORES": str(available + 5)}) == available
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ConfigurationError, match="SIMRUN_CORES"):
            cores({"SIMRUN_CORES": bad})


def test_the_memory_limit_without_a_cgroup_limit_is_the_plans() -> None:
    assert memory_limit({}) is None  # this process's cgroup has no limit
    assert memory_limit({"SIMRUN_MEMORY_LIMIT_GB": "1.5"}) == int(1.5 * GIB)
    source = {"SIMRUN_MEMORY_SOURCE": "process", "SIMRUN_MEMORY_LIMIT_GB": "2"}
    assert memory_limit(source) == 2 * GIB
    for bad in ("0", "-2", "lots", "nan", "inf"):
        with pytest.raises(ConfigurationError, match="SIMRUN_MEMORY_LIMIT_GB"):
            memory_limit({"SIMRUN_MEMORY_LIMIT_GB": bad})
    with pytest.raises(ConfigurationError, match="SIMRUN_MEMORY_SOURCE"):
        memory_limit({"SIMRUN_MEMORY_SOURCE": "heap"})


def test_role_attempt_worker_grace_and_stale_have_defaults() -> None:
    assert config.role({}) == "extra" and config.role({"SIMRUN_ROLE": "base"}) == "base"
    assert config.attempt({}) == 0 and config.attempt({"SIMRUN_ATTEMPT": "3"}) == 3
    assert config.worker_id({}, "sweep", "base") == "sweep-w0"
    assert config.worker_id({"SIMRUN_WORKER": "sweep-w4"}, "sweep", "extra") == "sweep-w4"
    assert config.grace_s({}) == config.GRACE_S - config.STOP_MARGIN_S
    assert config.stale_s({}, 25.0) == 85.0
    assert config.stale_s({"SIMRUN_STALE_S": "2.5"}, 25.0) == 2.5
    with pytest.raises(ConfigurationError, match="SIMRUN_ATTEMPT"):
        config.attempt({"SIMRUN_ATTEMPT": "-1"})
    with pytest.raises(ConfigurationError, match="valid worker id"):
        config.worker_id({"SIMRUN_WORKER": "../up"}, "sweep", "extra")


def test_task_json_is_read_with_its_plan(store: Path) -> None:
    task_dir = make_task(store, "squares", {"n": 3}, coordinator_merges=True)

    task = config.read_task(paths_from_env({"SIMRUN_TASK_DIR": str(task_dir)}))

    assert (task.task, task.type, task.run) == ("sweep", "squares", "r1")
    assert task.settings == {"n": 3} and task.coordinator_merges
    assert task.plan_gb("base_gb") == 0.1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("{not json", "cannot be read"),
        ('{"settings": {}}', "has no task type"),
        ('{"type": "squares", "plan": {"per_worker_gb": "lots"}}', "plan.base_gb"),
    ],
)
def test_a_bad_task_json_is_a_configuration_error(
    tmp_path: Path, content: str | None, message: str
) -> None:
    if content is not None:
        (tmp_path / "task.json").write_text(content)
    paths = paths_from_env({"SIMRUN_TASK_DIR": str(tmp_path)})

    with pytest.raises(ConfigurationError, match=message):
        config.read_task(paths).plan_gb("base_gb")
