"""The grid of a command sweep: axes, products, zips, samples, placeholders."""

from __future__ import annotations

import json

import pytest

from harness.grid import SweepError, allowed_failures, format_value, parse_sweep
from harness.placeholders import PlaceholderError, fill, names, parse


def combinations(raw: dict) -> list[dict]:
    grid = parse_sweep(raw)
    return [grid.combination(unit) for unit in range(grid.size)]


def test_a_grid_is_the_product_of_its_axes_the_last_varying_fastest():
    found = combinations({"T": [1.5, 2.5], "seed": {"range": [0, 3]}})

    assert found == [
        {"T": 1.5, "seed": 0},
        {"T": 1.5, "seed": 1},
        {"T": 1.5, "seed": 2},
        {"T": 2.5, "seed": 0},
        {"T": 2.5, "seed": 1},
        {"T": 2.5, "seed": 2},
    ]


def test_range_linspace_and_logspace_give_the_values_numpy_would():
    assert [c["i"] for c in combinations({"i": {"range": [10, 0, -3]}})] == [10, 7, 4, 1]
    assert [c["T"] for c in combinations({"T": {"linspace": [0.5, 3.0, 26]}})] == [
        0.5 + k / 10 for k in range(26)
    ]
    assert [c["x"] for c in combinations({"x": {"logspace": [-2, 1, 4]}})] == [
        0.01,
        0.1,
        1.0,
        10.0,
    ]
    assert [c["x"] for c in combinations({"x": {"linspace": [3, 7, 1]}})] == [3.0]


def test_a_zip_pairs_axes_into_one_dimension_of_the_product():
    found = combinations(
        {"L": [8, 16, 32], "steps": [100, 400, 1600], "seed": [1, 2], "zip": [["L", "steps"]]}
    )

    assert [(c["L"], c["steps"], c["seed"]) for c in found] == [
        (8, 100, 1),
        (8, 100, 2),
        (16, 400, 1),
        (16, 400, 2),
        (32, 1600, 1),
        (32, 1600, 2),
    ]


def test_a_zip_of_axes_not_side_by_side_keeps_the_spec_order_of_the_axes():
    found = combinations({"a": [1, 2], "b": ["x", "y", "z"], "c": [10, 20], "zip": [["c", "a"]]})

    assert list(found[0]) == ["a", "b", "c"]
    assert [(c["a"], c["c"], c["b"]) for c in found[:3]] == [
        (1, 10, "x"),
        (1, 10, "y"),
        (1, 10, "z"),
    ]
    assert {(c["a"], c["c"]) for c in found} == {(1, 10), (2, 20)}


def test_a_latin_hypercube_with_a_seed_draws_the_same_combinations_every_time():
    raw = {
        "T": {"range": [0.5, 3.0]},
        "field": {"logspace": [-3, 0]},
        "model": ["ising", "potts"],
        "samples": {"n": 20, "method": "latin-hypercube", "seed": 7},
    }

    first = combinations(raw)

    assert first == combinations(json.loads(json.dumps(raw)))
    assert first == combinations(parse_sweep(raw).as_json())
    assert first != combinations({**raw, "samples": {**raw["samples"], "seed": 8}})
    # one sample in each twentieth of every interval: the hypercube's promise
    assert sorted(int((c["T"] - 0.5) / 2.5 * 20) for c in first) == list(range(20))
    assert all(0.001 <= c["field"] < 1 for c in first)
    assert [c["model"] for c in first].count("ising") == 10


def test_the_draws_of_a_seed_do_not_change_between_versions_of_simrun():
    found = combinations(
        {"x": {"range": [0.0, 1.0]}, "samples": {"n": 3, "method": "latin-hypercube", "seed": 1}}
    )
    # Pinned: a change of the drawing would give old seeds new combinations.
    assert [c["x"] for c in found] == [0.921258206325538, 0.418356341913141, 0.165145029030647]
    randoms = combinations({"k": {"range": [0, 100]}, "samples": {"n": 3, "seed": 1}})
    assert [c["k"] for c in randoms] == [13, 84, 76]


def test_the_normalised_form_is_deterministic_json_that_parses_to_the_same_grid():
    raw = {"seed": {"range": [0, 10]}, "T": {"linspace": [1, 2, 3]}, "s": ["a"], "zip": []}

    normalised = parse_sweep(raw).as_json()

    assert normalised == {
        "axes": ["seed", "T", "s"],
        "seed": {"range": [0, 10, 1]},
        "T": {"linspace": [1, 2, 3]},
        "s": ["a"],
    }
    assert json.loads(json.dumps(normalised)) == normalised
    assert parse_sweep(normalised) == parse_sweep(raw)


def test_the_order_of_the_axes_survives_a_store_that_sorts_keys():
    """A normalised sweep passes through ``write_json`` (sorted keys) and PostgreSQL's jsonb
    (keys reordered): its ``axes`` keep the order the spec gave, and the units follow it."""
    raw = {"T": [1, 2], "h": [10, 20], "a": ["x", "y"], "zip": [["h", "a"]]}
    stored = json.loads(json.dumps(parse_sweep(raw).as_json(), sort_keys=True))

    assert list(stored) == ["T", "a", "axes", "h", "zip"]
    grid = parse_sweep(stored)
    assert grid == parse_sweep(raw)
    assert grid.names == ["T", "h", "a"]
    assert [tuple(grid.combination(u).items()) for u in range(2)] == [
        (("T", 1), ("h", 10), ("a", "x")),
        (("T", 1), ("h", 20), ("a", "y")),
    ]


@pytest.mark.parametrize(
    ("axes", "words"),
    [
        (["T", "h"], "every axis once, in order: 'a' is missing"),
        (["T", "h", "a", "b"], "'b' is no axis"),
        (["T", "h", "h", "a"], "'h' is named twice"),
        ("T h a", "a list of the axis names"),
    ],
)
def test_axes_given_in_a_sweep_name_every_axis_once(axes, words):
    with pytest.raises(SweepError) as raised:
        parse_sweep({"axes": axes, "T": [1], "h": [2], "a": [3]})

    assert list(raised.value.errors) == ["axes"]
    assert words in raised.value.errors["axes"][0]


def test_a_grid_of_a_billion_combinations_is_counted_without_being_listed():
    grid = parse_sweep(
        {"a": {"range": [0, 1000]}, "b": {"range": [0, 1000]}, "c": {"range": [0, 1000]}}
    )

    assert grid.size == 10**9
    assert grid.combination(10**9 - 1) == {"a": 999, "b": 999, "c": 999}


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ({"T": []}, "T", "at least one value"),
        ({"T": {"range": [5, 1]}}, "T", "empty"),
        ({"T": {"range": [0, 10, 0]}}, "T", "cannot be 0"),
        ({"T": {"range": [0.5, 3.0, 0.5]}}, "T", "integers"),
        ({"T": {"range": [0.5, 3.0]}}, "T", "only samples"),
        ({"T": {"linspace": [0, 1]}}, "T", "[start, stop, n]"),
        ({"T": {"linspace": [0, 1, 0]}}, "T", "n ≥ 1"),
        ({"T": {"logspace": [0, 400, 3]}}, "T", "±300"),
        ({"T": {"steps": [0, 1]}}, "T", "not {steps: …}"),
        ({"T": 3}, "T", "an axis is a list"),
        ({"T": [[1]]}, "T.0", "a string, a number or a boolean"),
        ({"unit": [1]}, "unit", "a placeholder simrun fills"),
        ({"2T": [1]}, "2T", "[A-Za-z_]"),
        ({}, "", "at least one axis"),
        ({"a": [1], "b": [1, 2], "zip": [["a", "b"]]}, "zip.0", "a has 1, b has 2"),
        ({"a": [1], "zip": [["a", "c"]]}, "zip.0", "unknown axis 'c'"),
        ({"a": [1], "b": [2], "zip": [["a", "b"], ["b", "a"]]}, "zip.1", "zipped once"),
        ({"a": [1], "zip": [["a"]]}, "zip.0", "two axes or more"),
        ({"a": [1], "samples": {"n": 0}}, "samples.n", "≥ 1"),
        ({"a": [1], "samples": {"n": 3, "method": "sobol"}}, "samples.method", "latin-hypercube"),
        ({"a": [1], "samples": {"n": 3, "seeds": 1}}, "samples.seeds", "unknown field"),
    ],
)
def test_a_bad_sweep_is_refused_by_the_path_of_its_problem(raw, path, words):
    with pytest.raises(SweepError) as raised:
        parse_sweep(raw)

    assert path in raised.value.errors, raised.value.errors
    assert words in " ".join(raised.value.errors[path])


def test_failures_allowed_are_a_count_or_a_percentage_rounded_down():
    assert allowed_failures(5, 1000) == 5
    assert allowed_failures("2%", 1000) == 20
    assert allowed_failures("2%", 149) == 2
    assert allowed_failures("0.5%", 100) == 0


def test_values_become_arguments_as_a_program_reads_them():
    assert [format_value(v) for v in (1, 0.1, 1e-05, True, "x y")] == [
        "1",
        "0.1",
        "1e-05",
        "true",
        "x y",
    ]


def test_placeholders_are_filled_whole_inside_arguments_and_braces_escape():
    known = names(["T", "seed"], ["mesh"])
    values = {"T": "1.5", "seed": "3", "out": "/o", "unit": "7", "inputs.mesh": "/in/mesh"}

    filled = [
        fill(parse(arg, known), values)
        for arg in ["{T}", "--seed={seed}", "{out}/r-{unit}.json", "{inputs.mesh}", "{{T}}", "a}}b"]
    ]

    assert filled == ["1.5", "--seed=3", "/o/r-7.json", "/in/mesh", "{T}", "a}b"]


@pytest.mark.parametrize(
    ("arg", "words"),
    [
        ("{temp}", "unknown placeholder {temp}"),
        ("{seeds}", "did you mean {seed}?"),
        ("{inputs.grid}", "unknown placeholder {inputs.grid}"),
        ("{}", "an empty placeholder"),
        ("{ echo x; }", "write {{ and }} for the braces of a shell group"),
        ("{T", "a lone '{'"),
        ("T}", "a lone '}'"),
    ],
)
def test_a_bad_placeholder_is_refused_with_what_is_wrong(arg, words):
    with pytest.raises(PlaceholderError) as raised:
        parse(arg, names(["T", "seed"], ["mesh"]))

    assert words in str(raised.value)
