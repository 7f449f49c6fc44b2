"""The wait of a submission for the learning of its sources, without a server: it polls until
the run is planned or refused, and a Ctrl-C says the run goes on."""

from __future__ import annotations

from typing import Any

import pytest

from runs.client.errors import InvalidRequest
from runs.client.learning import learned


class Polled:
    """A client whose run moves through ``states`` one poll at a time."""

    def __init__(self, *answers: dict[str, Any] | BaseException) -> None:
        self.answers = list(answers)
        self.polls = 0

    def poll(self, run_id: str, **_: Any) -> dict[str, Any]:
        self.polls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return {"id": run_id, **answer}


def wait(client: Polled, lines: list[str]) -> dict[str, Any]:
    run = {"id": "r1", "state": "learning"}
    return learned(client, run, report=lines.append, poll_s=0, sleep=lambda s: None)


def test_a_run_not_learning_is_given_back_without_a_poll():
    client = Polled()
    assert learned(client, {"id": "r1", "state": "submitting"}, report=print, poll_s=0) == {
        "id": "r1",
        "state": "submitting",
    }
    assert client.polls == 0


def test_it_polls_until_planned_then_gives_the_run():
    lines: list[str] = []
    client = Polled({"state": "learning"}, {"state": "submitting", "refused": {}})
    assert wait(client, lines)["state"] == "submitting" and client.polls == 2
    assert lines == ["run r1 is learning the task types its sources ship: waiting for them"]


def test_a_refusal_raises_the_400s_error_by_field():
    refused = {"tasks.d.settings.steps": ["Input should be greater than or equal to 1"]}
    client = Polled({"state": "failed", "refused": refused})
    with pytest.raises(InvalidRequest) as error:
        wait(client, [])
    assert error.value.fields == refused
    assert "  tasks.d.settings.steps: Input should be greater than or equal to 1" in str(
        error.value
    )


def test_a_failure_that_is_no_refusal_gives_the_failed_run():
    client = Polled({"state": "failed", "message": "the learning timed out", "refused": {}})
    assert wait(client, [])["message"] == "the learning timed out"


def test_a_ctrl_c_says_the_run_goes_on():
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        wait(Polled(KeyboardInterrupt()), lines)
    assert lines[-1] == "stopped waiting: run r1 goes on (simrun show r1)"
