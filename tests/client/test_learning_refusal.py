"""``Client.submit`` of a run whose sources ship its type waits for the learning: settings the
type refuses raise ``InvalidRequest`` by field, as the 400 of a type already known does; good
ones give the run, planned."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.client import Client
from runs.client.errors import InvalidRequest
from tests.walkthrough import write_walkthrough

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_learned_types_refusal_raises_as_a_400_and_its_acceptance_gives_the_planned_run(
    client: Client, learner, tmp_path: Path
):
    spec = write_walkthrough(tmp_path)
    good = spec.read_text()
    spec.write_text(good.replace("steps: 200", "steps: 0"))

    with pytest.raises(InvalidRequest) as refused:
        client.submit(spec)

    assert list(refused.value.fields) == ["tasks.decay.settings.steps"]
    assert "greater than or equal to 1" in refused.value.fields["tasks.decay.settings.steps"][0]
    assert "tasks.decay.settings.steps" in str(refused.value)

    spec.write_text(good)
    run = client.submit(spec)
    assert run.state == "submitting" and [t["id"] for t in run.tasks] == ["decay"]
