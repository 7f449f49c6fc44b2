"""No document, however malformed, makes the parser raise anything but a SpecError."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.tasktypes import task_types
from runs.planning.spec import RunSpec, SpecError
from runs.planning.spec_document import parse_spec

TYPES = task_types()

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
task_ids = st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True), st.text(max_size=8))
settings_values = st.dictionaries(
    st.sampled_from(["n", "delay_s", "units", "mb", "hold_s", "points", "size", "x"]),
    scalars,
    max_size=3,
)
tasks = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["squares", "alloc", "ising", "csv-stats", "nope"]) | scalars,
        "command": st.lists(st.text(max_size=5) | st.integers(), max_size=3) | scalars,
        "settings": settings_values | json_values,
        "inputs": st.dictionaries(st.text(max_size=5), task_ids | scalars, max_size=2),
        "workers": scalars,
        "cores": scalars,
        "memory": st.dictionaries(
            st.sampled_from(["gb", "base_gb", "per_worker_gb", "x"]), scalars, max_size=3
        )
        | scalars,
        "image": st.text(max_size=30) | scalars,
    },
)
near_specs = st.fixed_dictionaries(
    {"tasks": st.dictionaries(task_ids, tasks, max_size=4) | json_values},
    optional={
        "name": scalars,
        "environment": json_values,
        "sources": st.lists(st.text(max_size=70), max_size=2) | scalars,
        "reserve_node": scalars,
        "commands": scalars,
    },
)


def assert_parses_or_reports(document):
    try:
        spec = parse_spec(document, types=TYPES)
    except SpecError as error:
        assert error.errors
        for path, messages in error.errors.items():
            assert isinstance(path, str) and path
            assert messages and all(isinstance(m, str) and m for m in messages)
    else:
        assert isinstance(spec, RunSpec)
        json.dumps(spec.dump())


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(near_specs)
def test_near_valid_specs_as_json_parse_or_report_field_errors(document):
    assert_parses_or_reports(json.dumps(document, allow_nan=True))


@FUZZ
@given(near_specs)
def test_near_valid_specs_as_yaml_parse_or_report_field_errors(document):
    assert_parses_or_reports(yaml.safe_dump(document))


@FUZZ
@given(json_values)
def test_any_json_value_parses_or_reports(document):
    assert_parses_or_reports(json.dumps(document, allow_nan=True))


@FUZZ
@given(st.text(max_size=200) | st.binary(max_size=200))
def test_any_text_or_bytes_parse_or_report(document):
    assert_parses_or_reports(document)


@pytest.mark.parametrize(
    "document",
    [
        "!!python/object/apply:os.system ['true']",
        "tasks: !!binary aGVsbG8=",
        "tasks: {s: {command: [ls]}}\n---\ntasks: {}",
        "? [a, b]\n: c",
        "tasks: {s: {type: squares, settings: {n: .nan}}}",
        "tasks: {s: {type: squares, settings: {n: 1e400}}}",
        "tasks: {s: {type: squares, settings: {n: 2019-01-01}}}",
        "tasks: {2: {command: [ls]}}",
        '{"tasks": {"s": {"type": "squares", "settings": {"n": NaN}}}}',
        "\x00\x01",
    ],
)
def test_hostile_documents_are_reported_not_crashed(document):
    with pytest.raises(SpecError):
        parse_spec(document, types=TYPES)
