"""``simrun render-workflow``: the Workflow of a spec, printed without a cluster or database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from runs.cli import main
from tests.backends.argo_schemas import schema_errors

SIMRUN = str(Path(sys.executable).parent / "simrun")
"""The console script, as a user runs it."""
SPEC = """
name: demo
tasks:
  sweep: {type: squares, settings: {n: 100}, workers: 3}
  summary: {type: csv-stats, inputs: {table: sweep}}
environment: {image: "registry.example/simrun-harness:0.1"}
reserve_node: true
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(SPEC)
    return path


def test_the_command_prints_a_valid_workflow_without_a_secret_or_a_database(
    spec_file: Path, tmp_path: Path
) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DJANGO_SETTINGS_MODULE", "SECRET_KEY", "DATABASE_URL"}
    }
    env |= {"SIMRUN_HOME": str(tmp_path / "home"), "SIMRUN_K8S_NAMESPACE": "sims"}
    done = subprocess.run(
        [SIMRUN, "render-workflow", str(spec_file), "--run-id", "r1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    workflow = yaml.safe_load(done.stdout)
    assert schema_errors(workflow) == []
    assert workflow["metadata"]["name"] == "simrun-r1"
    assert workflow["metadata"]["namespace"] == "sims"
    assert workflow["spec"]["nodeSelector"] == {"simrun/reserved": "r1"}
    names = {t["name"] for t in workflow["spec"]["templates"]}
    assert names == {"Run", "worker", "extra", "merge", "plugin"}
    tasks = {t["name"] for t in workflow["spec"]["templates"][0]["dag"]["tasks"]}
    assert tasks == {"sweep-w0", "sweep-extra", "sweep-merge", "summary"}


def test_json_output_and_the_image_of_the_environment(
    spec_file: Path, capsys: pytest.CaptureFixture[str], settings: Any
) -> None:
    settings.SIMRUN_CLUSTER = {**settings.SIMRUN_CLUSTER, "registry": "registry.example/sims"}
    spec_file.write_text(
        SPEC.replace('{image: "registry.example/simrun-harness:0.1"}', "{packages: [numpy]}")
    )

    assert main(["render-workflow", str(spec_file), "-o", "json"]) == 0

    workflow = json.loads(capsys.readouterr().out)
    image = workflow["spec"]["templates"][1]["container"]["image"]
    assert image.startswith("registry.example/sims/simrun-env:")
    assert workflow["metadata"]["name"] == "simrun-preview"


def test_a_bad_spec_prints_its_field_errors_and_exits_2(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file.write_text("tasks: {sweep: {type: squares, settings: {n: 0}}}")

    assert main(["render-workflow", str(spec_file)]) == 2
    assert "tasks.sweep.settings.n:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--run-id", "Bad_Id"], "run id"), (["--run-id", "a" * 17], "at most 16")],
)
def test_a_run_id_that_cannot_name_a_workflow_is_refused(
    spec_file: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["render-workflow", str(spec_file), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_spec_file_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render-workflow", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
