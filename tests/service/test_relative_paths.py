"""A program or script named by a relative path is refused at its argument: every task runs in
an empty working directory, where it is not."""

from __future__ import annotations

from typing import Any

import pytest

from harness.tasktypes import task_types
from runs.planning.spec import SpecError, validate_spec


def problems(command: list[str], **task: Any) -> dict[str, list[str]]:
    try:
        validate_spec({"tasks": {"t": {"command": command, **task}}}, types=task_types())
    except SpecError as error:
        return error.errors
    return {}


@pytest.mark.parametrize(
    ("command", "index"),
    [
        (["./sim", "--steps", "3"], 0),
        (["bin/ising"], 0),
        (["python", "relax.py", "--temperature", "1.0"], 1),
        (["python3", "-u", "scripts/fit.py"], 2),
        (["/usr/bin/python3.12", "-X", "dev", "fit.py"], 3),
        (["Rscript", "plot.R"], 1),
        (["bash", "run.sh"], 1),
    ],
)
def test_a_relative_program_or_script_is_a_400_at_its_argument(command: list[str], index: int):
    found = problems(command)
    assert list(found) == [f"tasks.t.command.{index}"]
    assert f"{command[index]!r} is a relative path" in found[f"tasks.t.command.{index}"][0]
    assert "absolute path" in found[f"tasks.t.command.{index}"][0]


def test_a_sweeps_relative_script_is_refused_the_same_way():
    found = problems(["python", "relax.py", "{T}"], sweep={"T": [1, 2]})
    assert list(found) == ["tasks.t.command.1"]


@pytest.mark.parametrize(
    "command",
    [
        ["python", "/home/me/relax.py"],
        ["python", "-m", "relax", "run.py"],
        ["python", "-c", "print(1)", "x.py"],
        ["sh", "-c", "cd /work && ./sim"],
        ["python", "inputs/code/fit.py"],
        ["inputs/tool/sim"],
        ["ising", "--out", "results/x.csv"],
        ["echo", "plot.py"],
        ["python", "{script}"],
        ["python"],
    ],
)
def test_absolute_staged_placeholder_and_non_file_arguments_are_accepted(command: list[str]):
    sweep = {"sweep": {"script": ["/a.py"]}} if "{script}" in command else {}
    assert problems(command, **sweep) == {}
