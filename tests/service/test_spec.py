"""The run specification: good documents pass, every bad one names the field it is about."""

from __future__ import annotations

import json

import pytest

from harness.tasktypes import task_types
from runs.planning.spec import MAX_DOCUMENT_BYTES, SpecError
from runs.planning.spec_document import parse_document, parse_spec

TYPES = task_types()

ISSUE_EXAMPLE = """
name: ising-sweep
tasks:
  sweep:
    type: squares
    settings: {n: 1000}
    workers: 3
    cores: 2
    memory: {per_worker_gb: 0.5, base_gb: 0.25}
  summary:
    type: csv-stats
    inputs: {table: sweep}
  plot:
    command: [python, -m, mypkg.plot, --in, inputs/stats]
    image: python:3.12-slim
    inputs: {stats: summary}
environment: {image: "registry.example/simrun-harness:0.1", packages: ["numpy==2.1.*"]}
sources: []
reserve_node: false
"""


def errors_of(document: str | bytes) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(document, types=TYPES)
    return caught.value.errors


def test_the_example_of_the_contract_is_valid():
    spec = parse_spec(ISSUE_EXAMPLE, types=TYPES)
    assert list(spec.tasks) == ["sweep", "summary", "plot"]
    assert spec.tasks["sweep"].workers == 3
    assert spec.tasks["sweep"].memory.per_worker_gb == 0.5
    assert spec.tasks["plot"].command == ["python", "-m", "mypkg.plot", "--in", "inputs/stats"]
    assert spec.environment.packages == ["numpy==2.1.*"]


def test_json_and_yaml_of_the_same_spec_are_the_same():
    from_yaml = parse_spec(ISSUE_EXAMPLE, types=TYPES)
    from_json = parse_spec(json.dumps(from_yaml.dump()), types=TYPES)
    assert from_json == from_yaml


def test_a_spec_keeps_its_order_and_drops_nothing_when_dumped():
    spec = parse_spec(ISSUE_EXAMPLE, types=TYPES)
    dumped = spec.dump()
    assert list(dumped["tasks"]) == ["sweep", "summary", "plot"]
    assert dumped["environment"]["image"] == "registry.example/simrun-harness:0.1"


GOOD = [
    "tasks: {one: {type: squares, settings: {n: 1}}}",
    "tasks: {one: {command: [echo, hi]}}",
    "tasks: {a: {type: alloc, settings: {units: 2, mb: 1}}, b: {command: [ls], inputs: {x: a}}}",
    "tasks: {a-b-c: {type: ising, settings: {points: 3}}}",
    '{"tasks": {"s": {"type": "squares", "settings": {"n": 5, "delay_s": 0.5}, "cores": 4}}}',
    "tasks: {s: {type: squares, settings: {n: 5}, memory: {gb: 2}}}\ncommands: docker",
    "tasks: {s: {type: squares, settings: {n: 5}}}\nreserve_node: true",
    "tasks: {s: {type: squares, settings: {n: 5}}}\nsources: [" + "a" * 64 + "]",
    "tasks: {" + "t" + "x" * 39 + ": {command: [ls]}}",
]


@pytest.mark.parametrize("document", GOOD)
def test_good_documents_are_accepted(document):
    assert parse_spec(document, types=TYPES).tasks


BAD = [
    # (document, the exact path of an error, a word its message contains)
    ("tasks: {sweep: {type: nope}}", "tasks.sweep.type", "unknown task type"),
    ("tasks: {sweep: {type: squares, settings: {n: 0}}}", "tasks.sweep.settings.n", "greater"),
    ("tasks: {sweep: {type: squares, settings: {}}}", "tasks.sweep.settings.n", "required"),
    (
        "tasks: {sweep: {type: squares, settings: {n: 2, x: 1}}}",
        "tasks.sweep.settings.x",
        "unknown",
    ),
    ("tasks: {s: {type: squares, command: [ls], settings: {n: 1}}}", "tasks.s", "not both"),
    ("tasks: {s: {settings: {n: 1}}}", "tasks.s", "type"),
    ("tasks: {s: {command: [ls], inputs: {x: nowhere}}}", "tasks.s.inputs.x", "unknown task"),
    ("tasks: {s: {command: [ls], inputs: {x: s}}}", "tasks.s.inputs.x", "own output"),
    (
        "tasks: {a: {command: [ls], inputs: {x: b}}, b: {command: [ls], inputs: {y: a}}}",
        "tasks.a.inputs",
        "cycle",
    ),
    ("tasks: {Sweep: {command: [ls]}}", "tasks.Sweep", "must match"),
    ("tasks: {1abc: {command: [ls]}}", "tasks.1abc", "must match"),
    ("tasks: {a_b: {command: [ls]}}", "tasks.a_b", "must match"),
    ("tasks: {sweep-: {command: [ls]}}", "tasks.sweep-", "ends with a letter or digit"),
    ("tasks: {" + "x" * 41 + ": {command: [ls]}}", "tasks." + "x" * 41, "at most 40"),
    ("tasks: {s: {command: python -m x}}", "tasks.s.command", "list"),
    ("tasks: {s: {command: [python, 3]}}", "tasks.s.command.1", "string"),
    ("tasks: {s: {command: []}}", "tasks.s.command", "at least 1"),
    ("tasks: {s: {type: squares, settings: {n: 1}, workers: 100000}}", "tasks.s.workers", "1000"),
    ("tasks: {s: {type: squares, settings: {n: 1}, cores: 0}}", "tasks.s.cores", "greater"),
    ("tasks: {s: {type: squares, settings: {n: 1}, cores: 100000}}", "tasks.s.cores", "less"),
    (
        "tasks: {s: {type: squares, settings: {n: 1}, memory: {gb: 99999}}}",
        "tasks.s.memory.gb",
        "less",
    ),
    (
        "tasks: {s: {type: squares, settings: {n: 1}, memory: {per_worker_gb: -1}}}",
        "tasks.s.memory.per_worker_gb",
        "at least 0.001",
    ),
    ("tasks: {s: {type: squares, settings: {n: 1}, workers: 2.5}}", "tasks.s.workers", "integer"),
    ("tasks: {s: {type: squares, settings: {n: 1}, workers: '3'}}", "tasks.s.workers", "integer"),
    ("tasks: {s: {command: [ls], settings: {a: 1}}}", "tasks.s.settings", "no settings"),
    ("tasks: {s: {command: [ls], workers: 3}}", "tasks.s.workers", "split"),
    ("tasks: {s: {type: csv-stats, workers: 3}}", "tasks.s.workers", "plugin"),
    ("tasks: {s: {command: [ls], inputs: {Bad Port: s}}}", "tasks.s.inputs", "port"),
    ("tasks: {s: {command: [ls], image: 'not an image!'}}", "tasks.s.image", "image"),
    ("tasks: {s: {command: [ls], typo: 1}}", "tasks.s.typo", "did you mean 'type'"),
    ("tasks: {}", "tasks", "at least 1"),
    ("name: x", "tasks", "required"),
    ("tasks: [a, b]", "tasks", "dictionary"),
    ("tasks: {s: {command: [ls]}}\nsources: [../../etc]", "sources.0", "snapshot"),
    ("tasks: {s: {command: [ls]}}\nreserve_node: maybe", "reserve_node", "boolean"),
    ("tasks: {s: {command: [ls]}}\ncommands: podman", "commands", "direct"),
    (
        "tasks: {s: {command: [ls]}}\nenvironment: {packages: [numpy, 'rm -rf /; x']}",
        "environment.packages.1",
        "requirement",
    ),
    ("tasks: {s: {command: [ls]}}\nname: " + "n" * 201, "name", "200"),
    (
        "tasks: {s: {type: squares, settings: {n: 1}}, s-merge: {command: [ls]}}",
        "tasks.s-merge",
        "collides",
    ),
    (
        "tasks: {s: {type: squares, settings: {n: 1}}, s-w1: {command: [ls]}}",
        "tasks.s-w1",
        "collides",
    ),
    ("tasks: {s: {type: ising, settings: {t_min: 3, t_max: 1}}}", "tasks.s.settings", "t_max"),
    ("- just\n- a list", "spec", "mapping"),
    ("tasks: {s: [unclosed", "spec", "YAML"),
    ("a: &x [1]\nb: *x\ntasks: {}", "spec", "aliases"),
    ("42", "spec", "mapping"),
    ("", "spec", "mapping"),
]


@pytest.mark.parametrize(("document", "path", "word"), BAD)
def test_bad_documents_name_the_field(document, path, word):
    errors = errors_of(document)
    assert path in errors, errors
    assert any(word.lower() in message.lower() for message in errors[path]), errors[path]


def test_a_command_given_as_a_string_says_how_to_write_it():
    errors = errors_of('tasks: {s: {command: "echo hello"}}')
    assert errors["tasks.s.command"] == [
        "a command is a list of arguments, not a string (no shell splits it): "
        'command: ["echo", "hello"], or command: ["sh", "-c", "echo hello"] for a shell'
    ]
    assert (
        'command: ["echo", "\'hi"]'
        in errors_of('tasks: {s: {command: "echo \'hi"}}')["tasks.s.command"][0]
    )


def test_every_problem_of_a_document_is_reported_at_once():
    errors = errors_of(
        "tasks: {a: {type: nope}, b: {type: squares, settings: {n: -1}},"
        " c: {command: [ls], inputs: {x: z}}}"
    )
    assert {"tasks.a.type", "tasks.b.settings.n", "tasks.c.inputs.x"} <= set(errors)


def test_a_malformed_task_does_not_hide_the_problems_of_the_others():
    errors = errors_of(
        "tasks:\n"
        "  sweep: {type: squares, settings: {n: 0}}\n"
        "  plot: {command: python -c x, inputs: {a: swep}}\n"
        "  stats: {type: csv-stats, inputs: {table: sweep, other: nowhere}}\n"
        "reserve_node: maybe\n"
    )
    assert set(errors) == {
        "tasks.plot.command",
        "tasks.plot.inputs.a",
        "tasks.sweep.settings.n",
        "tasks.stats.inputs.other",
        "reserve_node",
    }


def test_a_misspelled_top_level_field_names_the_known_fields_and_the_closest():
    errors = errors_of("tasks: {s: {command: [ls]}}\nreserve_nodes: true\n")
    (message,) = errors["reserve_nodes"]
    assert "unknown field 'reserve_nodes'" in message
    assert "known: cache, commands, environment, name, reserve_node, sources, tasks" in message
    assert message.endswith("did you mean 'reserve_node'?")


def test_misspelled_fields_of_nested_parts_name_their_own_known_fields():
    errors = errors_of(
        "tasks: {s: {type: squares, settings: {n: 2}, memory: {per_workr_gb: 1}}}\n"
        "environment: {pakages: [numpy]}\n"
    )
    assert "did you mean 'per_worker_gb'" in errors["tasks.s.memory.per_workr_gb"][0]
    assert "known: base_gb, gb, per_worker_gb" in errors["tasks.s.memory.per_workr_gb"][0]
    assert "did you mean 'packages'" in errors["environment.pakages"][0]


def test_unknown_names_give_the_known_ones_and_the_closest_match():
    errors = errors_of(
        "tasks:\n"
        "  sweep: {type: squars, settings: {n: 2}}\n"
        "  stats: {type: csv-stats, inputs: {table: swep}}\n"
        "  more: {type: squares, settings: {n: 2, dellay_s: 1}}\n"
    )
    assert errors["tasks.sweep.type"] == [
        "unknown task type 'squars' (known: alloc, csv-stats, ising, squares); "
        "did you mean 'squares'?"
    ]
    assert errors["tasks.stats.inputs.table"] == [
        "unknown task 'swep' (known: more, sweep); did you mean 'sweep'?"
    ]
    assert "did you mean 'delay_s'?" in errors["tasks.more.settings.dellay_s"][0]
    assert len(errors["tasks.more.settings.dellay_s"]) == 1  # not pydantic's words besides


def test_a_name_close_to_none_gives_the_known_ones_without_a_guess():
    (message,) = errors_of("tasks: {s: {type: zzzzzz}}")["tasks.s.type"]
    assert "known: alloc" in message and "did you mean" not in message


def test_a_typo_does_not_hide_a_cycle():
    errors = errors_of(
        "tasks:\n"
        "  a: {command: [ls], inputs: {x: b}}\n"
        "  b: {command: [ls], inputs: {y: c}}\n"
        "  c: {command: [ls], inputs: {z: a, w: nowhere}}\n"
    )
    assert "tasks.c.inputs.w" in errors
    assert errors["tasks.a.inputs"] == ["the inputs form a cycle: a -> b -> c -> a"]


def test_a_malformed_field_does_not_hide_the_settings_of_its_task():
    errors = errors_of(
        "tasks: {s: {type: ising, workers: four, settings: {points: sixteen}}}\nnmae: x\n"
    )
    assert set(errors) == {"tasks.s.workers", "tasks.s.settings.points", "nmae"}
    assert "did you mean 'name'" in errors["nmae"][0]


def test_a_collision_and_a_cycle_are_reported_with_the_other_problems():
    errors = errors_of(
        "tasks:\n"
        "  s: {type: squares, settings: {n: 0}}\n"
        "  s-merge: {command: [ls], inputs: {x: t}}\n"
        "  t: {command: [ls], inputs: {y: s-merge}}\n"
    )
    assert "collides" in errors["tasks.s-merge"][0]
    assert "cycle" in " ".join(errors["tasks.s-merge.inputs"] + errors.get("tasks.t.inputs", []))
    assert "tasks.s.settings.n" in errors


def test_a_document_larger_than_the_limit_is_refused_before_parsing():
    errors = errors_of(b"x" * (MAX_DOCUMENT_BYTES + 1))
    assert "larger" in errors["spec"][0]


def test_bytes_that_are_not_utf8_are_refused():
    assert "UTF-8" in errors_of(b"\xff\xfe\x00tasks")["spec"][0]


def test_deeply_nested_json_is_refused_not_crashed():
    deep = "[" * 100_000 + "]" * 100_000
    errors = errors_of(deep)
    assert "spec" in errors


def test_settings_larger_than_the_limit_are_refused():
    big = json.dumps({"tasks": {"s": {"type": "ising", "settings": {"x": "y" * 70_000}}}})
    assert "larger" in errors_of(big)["tasks.s.settings"][0]


def test_parse_document_reads_json_before_yaml():
    assert parse_document('{"a": 1}') == {"a": 1}
    assert parse_document("a: 1") == {"a": 1}


def counting_type(units):
    from pydantic import BaseModel

    from harness.tasktypes import TaskType

    class Settings(BaseModel):
        pass

    def count(settings):
        if isinstance(units, Exception):
            raise units
        return units

    return TaskType(
        name="counting",
        settings=Settings,
        units=count,
        compute=lambda s, c, i: i,
        merge=lambda s, m: None,
    )


@pytest.mark.parametrize(
    ("units", "word"),
    [(0, "units"), (10**9, "units"), ("7", "units"), (ZeroDivisionError("x"), "count")],
)
def test_a_type_that_counts_absurd_units_or_fails_to_count_is_an_error_of_its_settings(units, word):
    types = {**TYPES, "counting": counting_type(units)}
    with pytest.raises(SpecError) as caught:
        parse_spec("tasks: {s: {type: counting}}", types=types)
    assert word in caught.value.errors["tasks.s.settings"][0]


SIZED = "tasks: {{s: {{type: squares, settings: {{n: 1}}, {field}: {value}}}}}"


@pytest.mark.parametrize(
    ("field", "value", "path", "message"),
    [
        ("memory", "{gb: 1.0e-300}", "memory.gb", "at least 0.001"),
        ("memory", "{gb: 0.0009}", "memory.gb", "at least 0.001"),
        ("memory", "{gb: 0}", "memory.gb", "at least 0.001"),
        ("memory", "{per_worker_gb: 1.0e-9}", "memory.per_worker_gb", "at least 0.001"),
        ("memory", "{base_gb: 1.0e-9}", "memory.base_gb", "at least 0.001"),
        ("memory", "{base_gb: -1}", "memory.base_gb", "greater than or equal to 0"),
        ("memory", "{gb: .nan}", "memory.gb", "finite"),
        ("memory", "{gb: .inf}", "memory.gb", "finite"),
        ("memory", "{per_worker_gb: -.inf}", "memory.per_worker_gb", "finite"),
        ("memory", "{gb: 1.0e+300}", "memory.gb", "less than or equal to 4096"),
        ("cores", "1000000000", "cores", "less than or equal to 512"),
        ("cores", "-1", "cores", "greater than or equal to 1"),
        ("cores", ".nan", "cores", "integer"),
        ("workers", "1000000000", "workers", "less than or equal to 1000"),
        ("workers", ".inf", "workers", "integer"),
    ],
)
def test_every_number_of_a_task_is_finite_and_of_a_sensible_size(field, value, path, message):
    errors = errors_of(SIZED.format(field=field, value=value))
    assert any(message in text for text in errors[f"tasks.s.{path}"]), errors


@pytest.mark.parametrize(
    "document",
    [
        '{"tasks": {"s": {"type": "squares", "settings": {"n": 1}, "memory": {"gb": NaN}}}}',
        '{"tasks": {"s": {"type": "squares", "settings": {"n": 1}, "memory": {"gb": 1e999}}}}',
        '{"tasks": {"s": {"type": "squares", "settings": {"n": 1}, "memory": {"gb": -Infinity}}}}',
    ],
)
def test_json_non_finite_numbers_are_refused_by_their_field(document):
    errors = errors_of(document)
    assert errors["tasks.s.memory.gb"] == ["Input should be a finite number"]


def test_a_non_finite_number_in_a_task_types_settings_is_refused_by_its_path():
    errors = errors_of("tasks: {s: {type: ising, settings: {t_max: .inf}}}")
    assert any("finite" in text for text in errors["tasks.s.settings.t_max"]), errors


def test_the_smallest_memory_size_is_accepted():
    spec = parse_spec(SIZED.format(field="memory", value="{gb: 0.001, base_gb: 0}"), types=TYPES)
    assert spec.tasks["s"].memory.gb == 0.001


def test_the_issues_json_memory_of_1e_300_is_refused_with_the_minimum():
    document = (
        '{"tasks": {"s": {"type": "squares", "settings": {"n": 1}, "memory": {"gb": 1e-300}}}}'
    )
    assert errors_of(document) == {"tasks.s.memory.gb": ["must be at least 0.001 (GiB)"]}
