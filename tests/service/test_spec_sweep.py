"""A command with a sweep in the run spec: a split task of the type ``sweep`` whose settings
are the normalised sweep; every refusal names its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.sweep import SWEEP_TYPE
from harness.tasktypes import task_types
from runs.planning.planner import ObservedPeak, observation_keys, plan_run
from runs.planning.records import task_records
from runs.planning.spec import SpecError, sweep_settings, task_kind, validate_spec
from runs.planning.spec_document import parse_document, parse_spec

TYPES = task_types()

ISSUE_EXAMPLE = """
tasks:
  sim:
    command: [/opt/bin/md-sim, --temperature, "{T}", --seed, "{seed}", --out, "{out}/result.json"]
    sweep:
      T: {linspace: [0.5, 3.0, 26]}
      seed: {range: [0, 10]}
    workers: 4
    results: result.json
"""


def errors_of(document: str) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(document, types=TYPES)
    return caught.value.errors


def test_the_example_of_the_issue_is_a_split_task_of_260_units_on_4_workers():
    spec = parse_spec(ISSUE_EXAMPLE, types=TYPES)
    task = spec.tasks["sim"]

    assert task_kind(task, TYPES) == "split"
    record = task_records(spec, TYPES)["sim"]
    assert (record.kind, record.type) == ("split", SWEEP_TYPE)
    assert record.command == task.command
    assert record.settings == {
        "command": task.command,
        "sweep": {
            "axes": ["T", "seed"],
            "T": {"linspace": [0.5, 3.0, 26]},
            "seed": {"range": [0, 10, 1]},
        },
        "ports": [],
        "results": "result.json",
        "failures": {"allowed": 0},
    }
    assert TYPES[SWEEP_TYPE].units(TYPES[SWEEP_TYPE].parse_settings(record.settings)) == 260
    plan = plan_run(spec, types=TYPES)["sim"]
    assert plan.workers == 4 and plan.processes == 2
    assert "md-sim" in plan.why_short


def test_the_normalised_settings_are_the_same_json_for_the_same_sweep_written_otherwise():
    written = parse_spec(ISSUE_EXAMPLE, types=TYPES).tasks["sim"]
    explicit = ISSUE_EXAMPLE.replace("{range: [0, 10]}", "{range: [0, 10, 1]}").replace(
        "results: result.json", "results: result.json\n    failures: {allowed: 0}"
    )
    again = parse_spec(explicit, types=TYPES).tasks["sim"]

    assert json.dumps(sweep_settings(written)) == json.dumps(sweep_settings(again))


def test_a_dumped_sweep_spec_validates_to_the_same_spec():
    spec = parse_spec(ISSUE_EXAMPLE, types=TYPES)

    assert validate_spec(spec.dump(), types=TYPES) == spec


def test_a_sweep_is_observed_by_its_programs_name():
    spec = parse_spec(
        """
name: study
tasks:
  a: {command: [/opt/bin/md-sim, "{x}"], sweep: {x: [1]}}
  b: {command: [python, -m, md.relax, "{x}"], sweep: {x: [1]}}
  c: {command: [python, /home/me/scripts/fit.py, "{x}"], sweep: {x: [1]}}
  d: {command: [md-sim, "x.dat"]}
""",
        types=TYPES,
    )

    keys = observation_keys(spec)
    assert keys["a"].startswith("sweep:md-sim@") and keys["b"] == "sweep:python md.relax"
    assert keys["c"].startswith("sweep:python fit.py@") and keys["d"] == "command:study/d"


SHELL_SWEEPS = """
tasks:
  small: {command: [sh, -c, './scripts/small.sh "$1"', sh, "{x}"], sweep: {x: [1, 2]}}
  big: {command: [bash, -c, 'cd work && OMP_NUM_THREADS=1 exec ../big.sh "$1"', sh, "{x}"],
        sweep: {x: [1, 2]}}
  python: {command: [sh, -ec, 'mkdir -p out; python3 -m md.relax "$1"', sh, "{x}"],
           sweep: {x: [1, 2]}}
  builtins: {command: [sh, -c, 'echo "$1" > "$2"', sh, "{x}", "{out}/r"], sweep: {x: [1]}}
"""


def test_a_shell_line_is_observed_by_the_program_it_runs_not_by_the_shell():
    """Every ``sh -c`` shared one history, so unrelated scripts sized each other (issue 47)."""
    assert observation_keys(parse_spec(SHELL_SWEEPS, types=TYPES)) == {
        "small": "sweep:small.sh",
        "big": "sweep:big.sh",
        "python": "sweep:python3 md.relax",
        "builtins": "sweep:sh -c",
    }


def test_two_shell_scripts_with_different_needs_are_planned_from_separate_histories():
    spec = parse_spec(SHELL_SWEEPS, types=TYPES)
    keys = observation_keys(spec)
    big = [ObservedPeak(6.0, at=float(i)) for i in range(20)]
    small = [ObservedPeak(0.1, at=float(i)) for i in range(20)]
    plans = plan_run(spec, types=TYPES, observed={keys["big"]: big, keys["small"]: small})

    assert plans["big"].per_worker_gb >= 6.0 > 1.0 > plans["small"].per_worker_gb
    assert "20 observations of big.sh" in plans["big"].why
    assert "20 observations of small.sh" in plans["small"].why
    assert plans["python"].why.startswith("per-worker memory 1 GiB: default of python3 md.relax")


TWO_RUN_SH = """
tasks:
  one: {command: [sh, -c, 'cd /projects/one && ./run.sh "$1"', sh, "{x}"], sweep: {x: [1]}}
  two: {command: [sh, -c, '/projects/two/run.sh "$1"', sh, "{x}"], sweep: {x: [1]}}
  again: {command: [bash, -c, 'cd /projects/one; exec ./run.sh "$1"', sh, "{x}"],
          sweep: {x: [1]}}
"""


def test_two_scripts_of_one_name_in_two_folders_are_two_histories():
    """Two projects' ``run.sh`` shared one history, so one's kills widened the other's plans
    (issue 47); the same script, however its line reaches it, keeps one."""
    spec = parse_spec(TWO_RUN_SH, types=TYPES)
    keys = observation_keys(spec)
    assert keys["one"] != keys["two"] and keys["one"] == keys["again"]
    assert all(key.startswith("sweep:run.sh@") for key in keys.values())
    kills = [ObservedPeak(4.0, oom=True, at=float(i)) for i in range(3)]
    before = plan_run(spec, types=TYPES, observed={})
    after = plan_run(spec, types=TYPES, observed={keys["one"]: kills})

    assert after["two"] == before["two"]
    assert after["one"].per_worker_gb > before["one"].per_worker_gb
    assert after["again"].per_worker_gb == after["one"].per_worker_gb
    assert "of run.sh" in after["one"].why


def test_a_sweep_may_zip_sample_allow_failures_and_read_inputs():
    spec = parse_spec(
        """
tasks:
  mesh: {command: [make-mesh]}
  sim:
    command: [sim, --mesh, "{inputs.grid}/m.msh", --T, "{T}", --n, "{n}", --unit, "{unit}"]
    inputs: {grid: mesh}
    sweep:
      T: {range: [0.5, 3.0]}
      n: [8, 16]
      samples: {n: 50, method: latin-hypercube, seed: 4}
    failures: {allowed: "2%"}
""",
        types=TYPES,
    )

    settings = sweep_settings(spec.tasks["sim"])
    assert settings["ports"] == ["grid"] and settings["failures"] == {"allowed": "2%"}
    assert settings["sweep"]["samples"] == {"n": 50, "method": "latin-hypercube", "seed": 4}


@pytest.mark.parametrize(
    ("task", "path", "words"),
    [
        ('{command: [sim, "{Tt}"], sweep: {T: [1]}}', "tasks.sim.command.1", "did you mean {T}?"),
        (
            '{command: [sim, "{inputs.grid}"], sweep: {T: [1]}}',
            "tasks.sim.command.1",
            "{inputs.grid}",
        ),
        ('{command: [sim, "{T"], sweep: {T: [1]}}', "tasks.sim.command.1", "a lone '{'"),
        ("{command: [sim], sweep: {T: []}}", "tasks.sim.sweep.T", "at least one value"),
        ("{command: [sim], sweep: {T: {range: [0.5, 3.0]}}}", "tasks.sim.sweep.T", "interval"),
        ("{command: [sim], sweep: {T: {spaced: [1, 2]}}}", "tasks.sim.sweep.T", "an axis is"),
        ("{command: [sim], sweep: {}}", "tasks.sim.sweep", "at least one axis"),
        ("{command: [sim], sweep: [1, 2]}", "tasks.sim.sweep", "valid dictionary"),
        (
            "{command: [sim], sweep: {a: [1], b: [1, 2], zip: [[a, b]]}}",
            "tasks.sim.sweep.zip.0",
            "as many",
        ),
        ("{command: [sim], sweep: {a: [1], samples: {n: 0}}}", "tasks.sim.sweep.samples.n", "≥ 1"),
        (
            "{command: [sim], sweep: {a: {range: [0, 1000]}, b: {range: [0, 1000]}}}",
            "tasks.sim.sweep",
            "1,000,000 combinations, more than the 100,000",
        ),
        (
            "{command: [sim], sweep: {a: [1]}, failures: {allowed: -1}}",
            "tasks.sim.failures.allowed",
            "≥ 0",
        ),
        (
            '{command: [sim], sweep: {a: [1]}, failures: {allowed: "200%"}}',
            "tasks.sim.failures.allowed",
            "percentage",
        ),
        (
            "{command: [sim], sweep: {a: [1]}, failures: {allow: 1}}",
            "tasks.sim.failures.allow",
            "did you mean 'allowed'",
        ),
        (
            "{command: [sim], sweep: {a: [1]}, results: ../r.json}",
            "tasks.sim.results",
            "without '..'",
        ),
        ("{command: [sim], sweep: {a: [1]}, results: r.txt}", "tasks.sim.results", ".json file"),
        (
            "{command: [sim], sweep: {a: [1]}, image: 'python:3.12'}",
            "tasks.sim.image",
            "no image of its own",
        ),
        ("{command: [sim], results: r.json}", "tasks.sim.results", "only a command with a sweep"),
        (
            "{command: [sim], failures: {allowed: 1}}",
            "tasks.sim.failures",
            "only a command with a sweep",
        ),
        (
            "{type: squares, settings: {n: 1}, sweep: {a: [1]}}",
            "tasks.sim.sweep",
            "only a command task",
        ),
        ("{type: sweep, settings: {}}", "tasks.sim.type", "write command: [...] and sweep"),
    ],
)
def test_every_refusal_of_a_sweep_names_its_field(task, path, words):
    errors = errors_of(f"tasks:\n  sim: {task}\n")

    assert path in errors, errors
    assert words in " ".join(errors[path])


def test_a_malformed_field_beside_a_sweep_hides_none_of_its_problems():
    errors = errors_of('tasks:\n  sim: {command: [sim, "{x}"], sweep: {T: []}, workers: four}\n')

    assert set(errors) == {"tasks.sim.workers", "tasks.sim.sweep.T", "tasks.sim.command.1"}


def test_the_unit_cap_is_the_setting(settings):
    settings.SIMRUN_SWEEP_MAX_UNITS = 5

    errors = errors_of("tasks:\n  sim: {command: [sim, '{a}'], sweep: {a: {range: [0, 6]}}}\n")
    parse_spec("tasks:\n  sim: {command: [sim, '{a}'], sweep: {a: {range: [0, 5]}}}\n", types=TYPES)

    assert "more than the 5 a task may have" in errors["tasks.sim.sweep"][0]


def test_a_task_named_like_a_pod_of_a_sweep_collides_with_it():
    errors = errors_of(
        "tasks:\n  sim: {command: [sim], sweep: {a: [1]}}\n  sim-merge: {command: [x]}\n"
    )

    assert "collides with a pod of the split task 'sim'" in errors["tasks.sim-merge"][0]


def test_sweep_is_not_offered_as_a_known_task_type():
    errors = errors_of("tasks:\n  sim: {type: sweeps}\n")

    assert "sweep," not in errors["tasks.sim.type"][0] and "squares" in errors["tasks.sim.type"][0]


def test_the_sweep_of_docs_run_spec_is_the_valid_sweep_it_says():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "run-spec.md").read_text()
    example = docs.split("## Sweeps", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    data = parse_document(example)
    assert data.pop("sources") == ["./md-sim-pkg"]  # uploaded by simrun submit as a snapshot

    spec = validate_spec(data, types=TYPES)

    record = task_records(spec, TYPES)["sim"]
    assert TYPES[SWEEP_TYPE].units(TYPES[SWEEP_TYPE].parse_settings(record.settings)) == 260
    assert record.settings["failures"] == {"allowed": "2%"}


@pytest.mark.parametrize(
    ("text", "path", "said"),
    [
        (  # the axis no argument uses: every unit would run at --temperature 1.0
            "{command: [python, /home/me/relax.py, --temperature, '1.0'], sweep: {T: [0.5, 1.0]}}",
            "tasks.sim.sweep.T",
            "no argument of the command uses {T}",
        ),
        (  # one axis of two used
            "{command: [sim, '--a={a}'], sweep: {a: [1, 2], b: [3, 4]}}",
            "tasks.sim.sweep.b",
            "no argument of the command uses {b}",
        ),
        (  # a placeholder where nothing fills it
            "{command: [sim, '--T={T}']}",
            "tasks.sim.command.1",
            "{T} would be passed as it is written",
        ),
    ],
)
def test_a_sweep_axis_or_a_placeholder_that_changes_nothing_is_refused(text, path, said):
    errors = errors_of(f"tasks:\n  sim: {text}\n")
    assert said in " ".join(errors[path])


@pytest.mark.parametrize(
    "command",
    [
        "[sh, -c, 'echo ${HOME} {x}']",  # a program's text: its braces are its own
        "[python, -c, \"print(f'{x}')\"]",
        "[find, ., -exec, rm, '{}', ';']",
        "[sim, '{{T}}']",
    ],
)
def test_braces_of_a_plain_command_that_are_no_placeholder_pass(command):
    parse_spec(f"tasks:\n  sim: {{command: {command}}}\n", types=TYPES)
