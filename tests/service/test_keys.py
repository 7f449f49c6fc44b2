"""Task keys: a change invalidates exactly the tasks whose outputs it decides, downstream too."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import harness
from harness.tasktypes import task_types
from runs.models import Task
from runs.planning.keys import Environment, task_keys
from runs.planning.programs import named_files
from runs.planning.records import task_records
from runs.planning.spec import validate_spec
from tests.factories import submitted

TYPES = task_types()
SOURCE_A = "a" * 64
SOURCE_B = "b" * 64

BASE: dict[str, Any] = {
    "tasks": {
        "sweep": {"type": "squares", "settings": {"n": 10}},
        "other": {"type": "squares", "settings": {"n": 5}},
        "summary": {"type": "csv-stats", "inputs": {"table": "sweep"}},
        "plot": {"command": ["echo", "plot"], "inputs": {"stats": "summary"}},
        "sim": {
            "command": ["echo", "{T}"],
            "sweep": {"T": {"range": [0, 4]}},
        },
    },
    "environment": {"packages": ["numpy", "scipy"]},
}


def keys_of(document: dict[str, Any]) -> dict[str, str]:
    spec = validate_spec(document, types=TYPES, sources_learned=True)
    records = task_records(spec, TYPES)
    return task_keys(records, Environment.of(spec), named_files(records))


def changed(change) -> set[str]:
    """The tasks whose key a change of the base document changes."""
    document = copy.deepcopy(BASE)
    change(document)
    before, after = keys_of(BASE), keys_of(document)
    assert set(before) == set(after)
    return {task for task in before if before[task] != after[task]}


def test_a_key_is_a_sha256_and_the_same_document_gives_the_same_keys():
    keys = keys_of(BASE)
    assert all(len(key) == 64 and int(key, 16) >= 0 for key in keys.values())
    assert keys == keys_of(copy.deepcopy(BASE))
    assert len(set(keys.values())) == len(keys)


def test_a_change_of_plan_or_of_cache_invalidates_nothing():
    def plan(document):
        tasks = document["tasks"]
        tasks["sweep"].update(workers=3, cores=2, memory={"per_worker_gb": 0.5, "base_gb": 0.25})
        tasks["summary"]["memory"] = {"gb": 2.0}
        tasks["sim"]["workers"] = 4
        tasks["plot"]["cache"] = True

    assert changed(plan) == set()


def test_a_change_of_settings_invalidates_the_task_and_everything_downstream_of_it():
    assert changed(lambda d: d["tasks"]["sweep"]["settings"].update(n=11)) == {
        "sweep",
        "summary",
        "plot",
    }
    assert changed(lambda d: d["tasks"]["summary"].update(settings={"port": "table"})) == set()
    assert changed(lambda d: d["tasks"]["other"]["settings"].update(delay_s=0.1)) == {"other"}


def test_a_change_of_a_command_or_its_sweep_invalidates_that_task_and_what_reads_it():
    assert changed(lambda d: d["tasks"]["plot"].update(command=["echo", "plots"])) == {"plot"}
    assert changed(lambda d: d["tasks"]["sim"]["sweep"].update(T={"range": [0, 5]})) == {"sim"}
    # The same sweep written otherwise is the same sweep.
    assert changed(lambda d: d["tasks"]["sim"]["sweep"].update(T={"range": [0, 4, 1]})) == set()
    assert changed(lambda d: d["tasks"]["sim"].update(failures={"allowed": 1})) == {"sim"}
    # A command's own image is where it runs: that task's, not the others'.
    assert changed(lambda d: d["tasks"]["plot"].update(image="python:3.12-slim")) == {"plot"}


def test_reading_another_task_or_under_another_port_invalidates_the_reader_downstream():
    assert changed(lambda d: d["tasks"]["summary"].update(inputs={"table": "other"})) == {
        "summary",
        "plot",
    }
    assert changed(lambda d: d["tasks"]["plot"].update(inputs={"table": "summary"})) == {"plot"}


def test_a_change_of_the_environment_invalidates_every_task_but_not_the_packages_order():
    every = set(BASE["tasks"])
    assert changed(lambda d: d["environment"].update(packages=["numpy", "scipy==1.13"])) == every
    assert changed(lambda d: d["environment"].update(image="python:3.12-slim")) == every
    assert changed(lambda d: d["environment"].update(packages=["scipy", "numpy"])) == set()


def test_another_version_of_simrun_invalidates_every_task(monkeypatch):
    before = keys_of(BASE)
    monkeypatch.setattr(harness, "__version__", harness.__version__ + ".post1")
    after = keys_of(BASE)
    assert all(before[task] != after[task] for task in BASE["tasks"])


def test_a_change_of_a_source_snapshot_invalidates_every_task():
    document = copy.deepcopy(BASE)
    document["sources"] = [SOURCE_A]
    other = copy.deepcopy(BASE)
    other["sources"] = [SOURCE_B]
    assert keys_of(document) != keys_of(other)
    assert all(keys_of(document)[t] != keys_of(other)[t] for t in BASE["tasks"])
    assert keys_of(document) == keys_of(copy.deepcopy(document))


def test_a_name_or_a_task_id_is_no_part_of_a_key():
    document = copy.deepcopy(BASE)
    document["name"] = "renamed"
    tasks = document["tasks"]
    tasks["squares"] = tasks.pop("other")
    assert keys_of(document)["squares"] == keys_of(BASE)["other"]
    assert {t: k for t, k in keys_of(document).items() if t != "squares"} == {
        t: k for t, k in keys_of(BASE).items() if t != "other"
    }


@pytest.mark.django_db
def test_each_task_is_stored_with_its_key_at_submission(owner):
    run = submitted(owner)
    stored = dict(Task.objects.filter(run=run).values_list("task_id", "key"))
    spec = validate_spec(run.spec, types=TYPES)
    records = task_records(spec, TYPES)
    assert stored == task_keys(records, Environment.of(spec), named_files(records))
