"""Task types: the registry, the settings errors, and the examples that ship with simrun."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import TaskPaths
from harness.errors import ConfigurationError
from harness.merge import MERGED_MARKER, run_merge
from harness.tasktypes import TaskType, get_task_type
from harness.worker import run_worker
from tests.harness.task_dirs import make_task


def test_an_unknown_task_type_is_a_configuration_error_naming_it_and_the_known() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown task type 'cubes' \(known: .*squares"):
        get_task_type("cubes")


def test_settings_that_fail_validation_name_their_fields() -> None:
    with pytest.raises(ConfigurationError, match=r"'squares': n: .*; delay_s: "):
        get_task_type("squares").settings_or_error({"n": 0, "delay_s": -1})


def test_a_task_type_has_split_functions_or_a_command() -> None:
    squares = get_task_type("squares")
    with pytest.raises(TypeError, match="units, compute, merge"):
        TaskType(name="half", settings=squares.settings, units=squares.units)
    with pytest.raises(TypeError, match="split functions or a command"):
        TaskType(
            name="both",
            settings=squares.settings,
            units=squares.units,
            compute=squares.compute,
            merge=squares.merge,
            command=lambda s: ["true"],
        )


PLUGIN = """
from pydantic import BaseModel
from harness.tasktypes import TaskType

class Settings(BaseModel):
    what: str = "x"

TASK_TYPE = TaskType(name="echo", settings=Settings, command=lambda s: ["echo", s.what])
"""


def test_a_task_type_registered_by_an_entry_point_is_known(tmp_path: Path) -> None:
    (tmp_path / "echo_plugin.py").write_text(PLUGIN)
    info = tmp_path / "echo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[simrun.task_types]\necho = echo_plugin:TASK_TYPE\n")
    probe = (
        "from harness.tasktypes import get_task_type\n"
        "t = get_task_type('echo')\n"
        "print(t.splittable, t.command(t.parse_settings({'what': 'hi'})))"
    )

    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )

    assert result.stdout.strip() == "False ['echo', 'hi']"


def _sweep(store: Path, type_: str, raw: dict) -> Path:
    """Run a split example type through a worker and the merge; returns its ``out/``."""
    task_type = get_task_type(type_)
    settings = task_type.parse_settings(raw)
    paths = TaskPaths(task_dir=make_task(store, type_, raw), store=store)
    run_worker(
        task_type, settings, paths, "w", cores=2, memory_bytes=None, base_gb=0.1, per_worker_gb=0.1
    )
    run_merge(task_type, settings, paths)
    assert (paths.out / MERGED_MARKER).exists()
    return paths.out


def test_alloc_writes_the_units_done(store: Path) -> None:
    out = _sweep(store, "alloc", {"units": 3, "mb": 2})

    assert json.loads((out / "alloc.json").read_text()) == {"units_done": [0, 1, 2], "mb": 2}


def test_ising_writes_a_csv_and_a_plot_of_its_sweep(store: Path) -> None:
    out = _sweep(store, "ising", {"size": 4, "points": 3, "sweeps": 10, "t_min": 1, "t_max": 5})

    rows = list(csv.DictReader((out / "ising.csv").open()))
    assert [float(r["temperature"]) for r in rows] == [1.0, 3.0, 5.0]
    assert float(rows[0]["magnetization"]) > float(rows[2]["magnetization"])  # ordered when cold
    assert (out / "ising.svg").read_text().startswith("<svg")


def test_the_plugin_example_is_a_command_run_through_simrun_exec() -> None:
    csv_stats = get_task_type("csv-stats")

    assert not csv_stats.splittable
    assert csv_stats.command(csv_stats.parse_settings({})) == [  # type: ignore[misc]
        "python",
        "-m",
        "harness.examples.csv_stats",
        "--port",
        "table",
    ]
