"""Runs end to end through ``simrun serve``: submitted with a token, run as local processes."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.e2e.service import (
    Service,
    run_of,
    run_processes,
    submit,
    wait_until_ended,
)
from tests.polling import wait_for

pytestmark = pytest.mark.slow

GRACE_S = 30.0
"""The grace period of the harness, the local backend's from SIGTERM to SIGKILL."""


def squares(n: int, **settings: object) -> dict[str, object]:
    return {"type": "squares", "workers": 2, "settings": {"n": n, **settings}}


def attempt_files(service: Service, run_id: str, task: str) -> dict[str, dict]:
    logs = service.store / "runs" / run_id / "tasks" / task / "logs"
    return {p.name: json.loads(p.read_text()) for p in logs.glob("*.launch")} | {
        p.name: json.loads(p.read_text()) for p in logs.glob("*.exit")
    }


def test_squares_with_500_units_reaches_succeeded_with_its_exact_output(service: Service):
    with service.client(service.user("sam")) as api:
        run_id = submit(api, {"name": "squares", "tasks": {"sq": squares(500)}})
        run = wait_until_ended(api, run_id)
    assert run["state"] == "succeeded", run
    out = service.store / "runs" / run_id / "tasks" / "sq" / "out"
    assert json.loads((out / "squares.json").read_text()) == [i * i for i in range(500)]
    assert run_processes(service.store, run_id) == []


def test_a_split_task_feeding_a_plugin_feeding_a_command_runs_in_order(service: Service):
    spec = {
        "tasks": {
            "sq": squares(30),
            "stats": {"type": "csv-stats", "inputs": {"table": "sq"}},
            "show": {
                "command": ["python", "-c", "print(open('inputs/stats/stats.json').read())"],
                "inputs": {"stats": "stats"},
            },
        }
    }
    with service.client(service.user("dag")) as api:
        run_id = submit(api, spec)
        run = wait_until_ended(api, run_id)
    assert run["state"] == "succeeded", run
    spans = []
    for task, node in (("sq", "sq-w0"), ("stats", "stats"), ("show", "show")):
        files = attempt_files(service, run_id, task)
        spans.append((files[f"{node}-0.launch"]["started"], files[f"{node}-0.exit"]["ended"]))
    assert spans[0][1] <= spans[1][0] and spans[1][1] <= spans[2][0]
    log = service.store / "runs" / run_id / "tasks/show/logs/show-0.log"
    assert json.loads(log.read_text())["columns"]["square"]["max"] == 29 * 29


def test_a_unit_that_raises_fails_the_run_with_a_message_naming_the_unit(sqlite_service, token):
    with sqlite_service.client(token) as api:
        run_id = submit(api, {"tasks": {"sq": squares(20, fail_unit=13)}})
        run = wait_until_ended(api, run_id)
    assert run["state"] == "failed"
    assert "unit 13" in run["message"], run["message"]
    assert not re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", run["message"]), "a log line's prefix"


def test_a_sweep_with_allowed_failures_counts_them_with_their_exception_and_parameters(
    sqlite_service, token
):
    """Three units raise; the run succeeds, and says so: never a plain 11/11."""
    script = "import sys\nif int(sys.argv[1]) % 4 == 1: raise ValueError('bad ' + sys.argv[1])"
    spec = {
        "tasks": {
            "sim": {
                "command": ["python", "-c", script, "{i}", "{T}"],
                "sweep": {"i": {"range": [0, 11]}, "T": [0.5]},
                "failures": {"allowed": 3},
            }
        }
    }
    with sqlite_service.client(token) as api:
        run_id = submit(api, spec)
        run = wait_until_ended(api, run_id)
        task = api.get(f"runs/{run_id}/tasks/sim/").json()
        table = api.get(f"runs/{run_id}/tasks/sim/results/").json()
        listed = next(r for r in api.get("runs/").json()["results"] if r["id"] == run_id)
    assert run["state"] == "succeeded", run
    assert (run["units_done"], run["units_total"], run["units_failed"]) == (11, 11, 3)
    assert listed["units_failed"] == 3
    assert task["unit_failure"] == "unit 1 (i=1, T=0.5): ValueError: bad 1"
    errors = [row["error"] for row in table["results"] if row["error"]]
    assert errors == ["ValueError: bad 1", "ValueError: bad 5", "ValueError: bad 9"]


def test_a_cancelled_sweep_shows_the_rows_of_the_units_it_finished(sqlite_service, token):
    script = "import sys, time\ntime.sleep(0 if int(sys.argv[1]) < 3 else 8)"
    spec = {
        "tasks": {
            "sim": {"command": ["python", "-c", script, "{i}"], "sweep": {"i": {"range": [0, 40]}}}
        }
    }
    with sqlite_service.client(token) as api:
        run_id = submit(api, spec)
        wait_for(lambda: run_of(api, run_id)["units_done"] >= 3, 120, "the quick units to be done")
        assert api.post(f"runs/{run_id}/cancel/").status_code == 202
        wait_until_ended(api, run_id)
        table = api.get(f"runs/{run_id}/tasks/sim/results/").json()
    assert table["partial"] is True
    assert [row["i"] for row in table["results"]][:3] == [0, 1, 2]
    assert all(row["exit_code"] == 0 for row in table["results"])


def test_a_cancel_ends_every_process_of_the_run_within_the_grace_period(sqlite_service, token):
    with sqlite_service.client(token) as api:
        run_id = submit(api, {"tasks": {"sq": squares(200, delay_s=1.0)}})
        wait_for(lambda: run_of(api, run_id)["units_done"] > 0, 120, "the first units to be done")
        assert run_processes(sqlite_service.store, run_id)
        cancelled = time.monotonic()
        assert api.post(f"runs/{run_id}/cancel/").status_code == 202
        wait_for(
            lambda: not run_processes(sqlite_service.store, run_id),
            GRACE_S + 60.0,
            "every process of the run to end",
        )
        # By the grace's end, at the loop's next look (a loaded machine's a few seconds late).
        assert time.monotonic() - cancelled <= GRACE_S + 15.0
        assert run_of(api, run_id)["state"] == "cancelled"


def test_runs_whose_tasks_need_every_core_run_one_after_the_other_in_order(sqlite_service, token):
    def hold(seconds: float) -> dict[str, object]:
        return {"tasks": {"t": {"command": ["sleep", str(seconds)], "cores": 2}}}

    with sqlite_service.client(token) as api:
        first_holder = submit(api, hold(4))
        # Started (or, on a loaded machine polled too seldom, already done): the others after.
        wait_for(
            lambda: run_of(api, first_holder)["state"] in {"running", "succeeded"},
            what=f"run {first_holder} to start",
        )
        first, second = submit(api, hold(1)), submit(api, hold(1))
        for run_id in (first_holder, first, second):
            assert wait_until_ended(api, run_id)["state"] == "succeeded"
    spans = []
    for run_id in (first_holder, first, second):
        files = attempt_files(sqlite_service, run_id, "t")
        spans.append((files["t-0.launch"]["started"], files["t-0.exit"]["ended"]))
    assert spans[0][1] <= spans[1][0] and spans[1][1] <= spans[2][0]


def alloc(mb: int) -> dict[str, object]:
    """An alloc task sized by its spec, so what earlier runs taught the planner changes nothing."""
    return {
        "type": "alloc",
        "cores": 1,
        "memory": {"per_worker_gb": 0.25},
        "settings": {"units": 2, "mb": mb, "hold_s": 0.2},
    }


def test_alloc_past_its_plan_is_killed_for_memory_retried_and_succeeds(sqlite_service, token):
    with sqlite_service.client(token) as api:
        run_id = submit(api, {"tasks": {"mem": alloc(500)}})
        run = wait_until_ended(api, run_id)
    assert run["state"] == "succeeded", run
    assert run["memory_enforced"]
    [task] = run["tasks"]
    assert task["plan"]["memory_gb"] * 1024 < 500 < task["plan"]["retry_memory_gb"] * 1024
    attempts = {(a["worker"], a["attempt"]): a for a in task["attempts"]}
    assert attempts[("mem-w0", 0)]["oom_killed"]
    retried = sqlite_service.store / f"runs/{run_id}/tasks/mem/logs/mem-w0-1.exit"
    assert json.loads(retried.read_text())["exit_code"] == 0


def test_alloc_past_the_retry_memory_too_fails_the_run_naming_it(sqlite_service, token):
    with sqlite_service.client(token) as api:
        run_id = submit(api, {"tasks": {"mem": alloc(1000)}})
        run = wait_until_ended(api, run_id)
    assert run["state"] == "failed", run
    [task] = run["tasks"]
    retry = task["plan"]["retry_memory_gb"]
    assert f"{retry:g}" in run["message"], run["message"]
    assert [a["oom_killed"] for a in task["attempts"]] == [True, True]
