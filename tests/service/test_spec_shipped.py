"""The spec's rule for a type only a run's sources may ship: left to them, never taken as known."""

from __future__ import annotations

import pytest

from harness.tasktypes import ShippedType, registered_types
from runs.spec import SpecError, validate_spec

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
