"""Following a run on a terminal: progress bars per task, the exit code of its end."""

from __future__ import annotations

import io
import re

from rich.console import Console

from runs.cli.client_commands import EXIT_UNAVAILABLE, CliError
from runs.cli.progress import follow


class ScriptedClient:
    """Answers ``GET /api/runs/<id>/`` with one scripted state after the other."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)

    def get(self, path: str, missing: str = ""):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def run(state: str, done: int, message: str = "", duration_s: float = 75) -> dict:
    task = {"id": "sweep", "state": "running" if state == "running" else "done"}
    task |= {"units_done": done, "units_total": 10}
    return {"state": state, "message": message, "duration_s": duration_s, "tasks": [task]}


def test_a_terminal_shows_a_bar_per_task_and_a_success_exits_0():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    client = ScriptedClient(run("running", 3), run("running", 7), run("succeeded", 10))
    assert follow(client, "r1", console, sleep=lambda s: None) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # without colours
    assert "sweep" in text and "10/10" in text and "━" in text
    assert "run r1 succeeded after 1m 15s" in text


def test_a_failure_exits_1_with_its_message():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=100)
    client = ScriptedClient(run("running", 3), run("failed", 3, "task sweep: unit 3 failed"))
    assert follow(client, "r1", console, sleep=lambda s: None) == 1
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["sweep", "running", "3/10", "units"]
    assert lines[-1] == "run r1 failed after 1m 15s: task sweep: unit 3 failed"


def test_a_server_that_stops_answering_for_a_moment_is_waited_for():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False)
    outage = CliError("cannot reach the simrun server", EXIT_UNAVAILABLE)
    client = ScriptedClient(run("running", 1), outage, outage, run("succeeded", 10))
    assert follow(client, "r1", console, sleep=lambda s: None) == 0


def test_the_elapsed_time_is_the_runs_own_from_its_creation():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    started_long_ago = [run("running", 3, duration_s=3725), run("succeeded", 10, duration_s=3726)]
    assert follow(ScriptedClient(*started_long_ago), "r1", console, sleep=lambda s: None) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    bars = [line for line in text.splitlines() if line.startswith("sweep")]
    assert bars and all("1h 02m" in line for line in bars), bars
    assert "0:00:0" not in text


def test_ctrl_c_stops_following_and_says_the_run_goes_on():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    client = ScriptedClient(run("running", 3), KeyboardInterrupt())
    assert follow(client, "r1", console, sleep=lambda s: None) == 130
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("stopped following run r1; the run goes on")
    assert "`simrun cancel r1`" in last


def test_a_run_learning_its_sources_says_so_once_then_shows_its_tasks():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    learning = {"state": "learning", "message": "learning the task types", "tasks": []}
    client = ScriptedClient(learning, learning, run("running", 3), run("succeeded", 10))
    assert follow(client, "r1", console, sleep=lambda s: None) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "run r1 is learning: learning the task types"
    assert sum("learning" in line for line in lines) == 1
