"""The spec's rule for a type only a run's sources may ship: left to them, never taken as known."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from harness.describe import describe_type
from harness.tasktypes import ShippedType, TaskType, input_names, registered_types
from runs.planning.learned_types import canonical, learned_type
from runs.planning.spec import SpecError, validate_spec

SOURCE = "ab" * 32


def spec(**extra: object) -> dict[str, object]:
    return {"tasks": {"decay": {"type": "decay", "settings": {"rates": [0.1]}}}, **extra}


def test_a_type_unknown_here_is_left_to_the_sources_of_the_spec() -> None:
    found = validate_spec(spec(sources=[SOURCE]), types=registered_types())
    assert found.tasks["decay"].type == "decay"


@pytest.mark.parametrize(
    ("document", "learned"),
    [(spec(), False), (spec(sources=[SOURCE]), True)],
    ids=["without sources", "sources learned"],
)
def test_a_type_unknown_without_sources_or_after_learning_them_is_an_error(
    document: dict[str, object], learned: bool
) -> None:
    types = {**registered_types(), "decay": ShippedType(name="decay")}  # another run's
    with pytest.raises(SpecError) as refused:
        validate_spec(document, types=types, sources_learned=learned)
    message = refused.value.errors["tasks.decay.type"][0]
    assert "unknown task type 'decay'" in message and "decay," not in message


def learned_decay(*settings: dict[str, object]) -> dict[str, object]:
    """The service's types and ``decay`` as learned from sources, having judged ``settings``."""
    info = {"kind": "split", "fields": ["rates", "steps"], "extra": "ignore"}
    judged = {canonical(s): {"settings": s, "units": 1} for s in settings}
    return {**registered_types(), "decay": learned_type("decay", info, judged)}


def test_a_learned_types_unknown_setting_lists_its_real_names() -> None:
    settings = {"rates": [0.1], "step": 5}
    with pytest.raises(SpecError) as refused:
        validate_spec(
            spec(sources=[SOURCE], tasks={"decay": {"type": "decay", "settings": settings}}),
            types=learned_decay(settings),
            sources_learned=True,
        )
    message = refused.value.errors["tasks.decay.settings.step"][0]
    assert "(known: rates, steps); did you mean 'steps'?" in message
    assert "field" not in message


def test_a_learned_types_internal_field_names_are_unknown_settings() -> None:
    settings = {"rates": [0.1], "field0": 7}
    with pytest.raises(SpecError) as refused:
        validate_spec(
            spec(sources=[SOURCE], tasks={"decay": {"type": "decay", "settings": settings}}),
            types=learned_decay(settings),
            sources_learned=True,
        )
    assert (
        "unknown setting of decay 'field0'"
        in refused.value.errors["tasks.decay.settings.field0"][0]
    )


class Aliased(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step_count: int = Field(default=1, alias="steps")


class AliasedByName(Aliased):
    model_config = ConfigDict(extra="forbid", validate_by_name=True)


def test_a_types_settings_are_named_by_their_aliases_and_by_name_only_where_it_validates_so() -> (
    None
):
    assert input_names(Aliased) == {"steps"}
    assert input_names(AliasedByName) == {"steps", "step_count"}
    described = describe_type(TaskType(name="t", settings=Aliased, command=lambda _: ["true"]))
    assert described["fields"] == ["steps"] and described["defaults"] == {"steps": 1}
