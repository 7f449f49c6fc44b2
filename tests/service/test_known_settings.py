"""What is kept of a learned type refuses new settings its schema's bounds refuse, in the words
pydantic uses for the same field, and nothing its bounds do not say."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from harness.describe import describe_type
from harness.tasktypes import TaskType, task_types
from runs.planning.known_settings import refusals
from runs.planning.learned_types import canonical
from runs.planning.spec import validate_spec


class Inner(BaseModel):
    k: int = Field(default=2, ge=2)


class Bounded(BaseModel):
    rates: list[float] = Field(default=[1.0], min_length=1, max_length=3)
    steps: int = Field(default=1000, ge=1, le=10**6)
    step_size: float = Field(default=0.5, gt=0, lt=1, alias="step-size")
    even: int = Field(default=2, multiple_of=2)
    label: str = Field(default="ab", min_length=2, max_length=4)
    optional: int | None = Field(default=None, gt=0)
    inner: Inner = Inner()


MODEL = TaskType(name="model", settings=Bounded, command=lambda settings: ["true"])
KNOWN = {"types": {"model": describe_type(MODEL)}}


def refused(settings: dict[str, Any], known: dict[str, Any] = KNOWN) -> dict[str, list[str]]:
    spec = validate_spec(
        {"tasks": {"t": {"type": "model", "settings": settings}}, "sources": ["a" * 64]},
        types=task_types(),
    )
    return refusals(spec, known, canonical)


@pytest.mark.parametrize(
    "raw",
    [
        {"steps": 0},
        {"steps": 10**6 + 1},
        {"step-size": 0},
        {"step-size": 1.0},
        {"even": 3},
        {"rates": []},
        {"rates": [1, 2, 3, 4]},
        {"label": "a"},
        {"label": "abcde"},
        {"optional": 0},
        {"inner": {"k": 1}},
    ],
)
def test_a_bound_refuses_as_pydantic_does_at_the_same_field(raw: dict[str, Any]):
    with pytest.raises(ValidationError) as pydantic_says:
        Bounded.model_validate(raw)
    expected = {
        ".".join(["tasks.t.settings", *map(str, e["loc"])]): [e["msg"]]
        for e in pydantic_says.value.errors()
    }
    found = refused(raw)
    # An optional bound (anyOf with null) is left to the learning: never refused too early.
    assert found == ({} if "optional" in raw else expected)


@pytest.mark.parametrize(
    "raw",
    [{"steps": "5"}, {"steps": 5}, {"label": 12}, {"rates": "1,2"}, {"unknown": -1}, {}],
)
def test_what_the_bounds_do_not_refuse_is_left_to_the_type(raw: dict[str, Any]):
    assert refused(raw) == {}


def test_a_verdict_kept_of_the_same_settings_is_given_as_the_type_gave_it():
    known = {
        **KNOWN,
        "settings": {
            "model": {
                canonical({"steps": 7}): {
                    "errors": [{"loc": ["steps"], "msg": "Value error, seven", "type": "x"}]
                }
            }
        },
    }
    assert refused({"steps": 7}, known) == {"tasks.t.settings.steps": ["Value error, seven"]}
    assert refused({"steps": 7}) == {}
