"""The harness's side of task types a run's sources ship: describing them, running a plugin's
command, and installing the sources with one line in the log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.describe import describe
from harness.plugin import command_of_task
from harness.sources import PIP_LOG
from runs.backends.local import env as local_env
from tests.walkthrough import PACKAGE, write_walkthrough


def test_describe_tells_the_types_and_judges_the_settings_asked_about() -> None:
    answer = describe({"squares": [{"n": 3}, {"n": 0}, {"m": 1}], "nothing": [{}]})
    squares = answer["types"]["squares"]
    assert squares["kind"] == "split" and answer["types"]["csv-stats"]["kind"] == "plugin"
    assert "n" in squares["fields"] and squares["defaults"]["delay_s"] == 0
    assert squares["per_worker_gb"] > 0 and squares["schema"]["properties"]["n"]
    fine, low, missing = answer["settings"]["squares"]
    assert fine == {"settings": {"n": 3, "delay_s": 0.0, "fail_unit": None}, "units": 3}
    assert low["errors"][0]["loc"] == ["n"] and "greater than" in low["errors"][0]["msg"]
    assert [e["loc"] for e in missing["errors"]] == [["n"]]
    assert "nothing" not in answer["settings"]  # a type this interpreter does not have


def test_describe_answers_as_a_command_in_json() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness.describe"],
        input=json.dumps({"settings": {"squares": [{"n": 2}]}}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["settings"]["squares"][0]["units"] == 2


def test_the_plugin_command_is_the_types_command_for_the_tasks_settings(tmp_path: Path) -> None:
    task_dir = tmp_path / "store" / "runs" / "r1" / "tasks" / "summary"
    task_dir.mkdir(parents=True)
    (task_dir / "task.json").write_text(
        json.dumps({"task": "summary", "type": "csv-stats", "settings": {"port": "rows"}})
    )
    command = command_of_task({"SIMRUN_TASK_DIR": str(task_dir)})
    assert command == [sys.executable, "-m", "harness.examples.csv_stats", "--port", "rows"]


def test_installing_sources_writes_one_line_and_keeps_pips_output(tmp_path: Path, capfd) -> None:
    write_walkthrough(tmp_path)
    venv = tmp_path / "venv"
    local_env.ensure(venv, [tmp_path / PACKAGE])
    out = capfd.readouterr().out
    assert len(out.splitlines()) == 1 and "installed the sources" in out, out
    assert "Successfully installed decay-sim" in (venv / "sources" / PIP_LOG).read_text()


def test_a_failed_install_shows_the_tail_of_pips_output(tmp_path: Path, capfd) -> None:
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "pyproject.toml").write_text("[project]\nname = 'broken'\nversion = 'x y'\n")
    with pytest.raises(subprocess.CalledProcessError) as failed:
        local_env.ensure(tmp_path / "venv", [package])
    assert "`project.version` must be pep440" in str(failed.value.output)
    assert "pip failed to install the sources" in capfd.readouterr().out
