"""Command sweeps through the API: a 201 with a split task of its combinations, a 400 naming
each field of a bad one, and the task file the harness reads."""

from __future__ import annotations

import json

import pytest

from harness.sweep import SweepSettings
from harness.tasktypes import task_types
from runs.models import Run
from runs.planning.spec import sweep_settings, validate_spec

pytestmark = pytest.mark.django_db

SWEEP = """
name: md
tasks:
  sim:
    command: [md-sim, --temperature, "{T}", --seed, "{seed}", --out, "{out}/result.json"]
    sweep:
      T: {linspace: [0.5, 3.0, 26]}
      seed: {range: [0, 10]}
    workers: 4
    results: result.json
    failures: {allowed: "2%"}
"""


def submit(client, body: str):
    return client.post("/api/runs/", data=body, content_type="application/yaml")


def test_a_command_sweep_is_a_split_task_of_its_combinations(owner_client, store):
    response = submit(owner_client, SWEEP)

    assert response.status_code == 201, response.json()
    [task] = response.json()["tasks"]
    assert (task["kind"], task["type"], task["units_total"]) == ("split", "sweep", 260)
    assert task["plan"]["workers"] == 4
    task_json = json.loads(
        (store / "runs" / response.json()["id"] / "tasks/sim/task.json").read_text()
    )
    assert task_json["type"] == "sweep" and task_json["units"] == 260
    assert task_json["settings"]["sweep"]["seed"] == {"range": [0, 10, 1]}
    assert task_json["settings"]["failures"] == {"allowed": "2%"}


def test_a_bad_sweep_is_a_400_naming_every_field_and_creates_nothing(owner_client, store):
    bad = SWEEP.replace('"{seed}"', '"{sead}"').replace("{range: [0, 10]}", "[]")
    bad = bad.replace('"2%"', "-3")

    response = submit(owner_client, bad)

    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {
        "tasks.sim.command.4",
        "tasks.sim.sweep.seed",
        "tasks.sim.failures.allowed",
    }
    assert "did you mean {seed}?" in errors["tasks.sim.command.4"][0]
    assert not Run.objects.exists() and not (store / "runs").exists()


def test_a_sweep_past_the_unit_cap_is_a_400(owner_client, settings):
    settings.SIMRUN_SWEEP_MAX_UNITS = 100

    response = submit(owner_client, SWEEP)

    assert response.status_code == 400
    assert "260 combinations, more than the 100" in response.json()["tasks.sim.sweep"][0]


UNSORTED = """
name: order
tasks:
  sim:
    command: [md-sim, "{T}", "{h}", "{a}", "{out}"]
    sweep:
      T: [1, 2]
      h: [10, 20, 30]
      a: [x, y]
"""


def test_the_axes_keep_the_order_of_the_spec_in_the_record_and_the_task_file(owner_client, store):
    """jsonb and the store's sorted JSON reorder a mapping's keys (``T``, ``a``, ``h``): the
    units and columns follow the order written (``T``, ``h``, ``a``) all the same."""
    response = submit(owner_client, UNSORTED)

    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    task_file = store / "runs" / run.id / "tasks/sim/task.json"
    kept = {
        "task.json": json.loads(task_file.read_text())["settings"],
        "record": run.tasks.get().settings,
        "spec": sweep_settings(validate_spec(run.spec, types=task_types()).tasks["sim"]),
    }
    for where, settings in kept.items():
        grid = SweepSettings.model_validate(settings).grid
        assert grid.names == ["T", "h", "a"], where
        assert list(grid.combination(1).values()) == [1, 10, "y"], where
