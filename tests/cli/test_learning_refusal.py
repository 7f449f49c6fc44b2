"""A type the service learns from a run's sources refuses its settings at submission, through
``simrun submit``: it waits for the learning and exits as a 400 would, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.cli.client_commands import EXIT_BAD_INPUT
from runs.models import Run
from tests.walkthrough import write_walkthrough

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_settings_a_learned_type_refuses_exit_as_a_400_naming_the_field(
    simrun, learner, tmp_path: Path
):
    spec = write_walkthrough(tmp_path)
    spec.write_text(spec.read_text().replace("steps: 200", "steps: 0"))

    done = simrun("submit", str(spec))

    assert done.code == EXIT_BAD_INPUT, done
    assert f"{spec} is not a valid run specification" in done.err
    assert "tasks.decay.settings.steps: Input should be greater than or equal to 1" in done.err
    assert "learning the task types its sources ship" in done.out
    [run] = Run.objects.all()
    assert run.state == "failed" and list(run.refused) == ["tasks.decay.settings.steps"]
