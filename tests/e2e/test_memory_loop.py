"""The memory loop end to end: a real OOM kill in a memory cgroup sizes the next run at once."""

from __future__ import annotations

import pytest

from runs.planning import sizing
from tests.e2e.service import logged_in, submit, wait_until_ended
from tests.polling import wait_for

pytestmark = pytest.mark.slow


def alloc(mb: int) -> dict[str, object]:
    return {"type": "alloc", "cores": 1, "settings": {"units": 2, "mb": mb, "hold_s": 0.2}}


def test_a_kill_for_memory_plans_the_next_run_above_it_and_it_succeeds_first_time(
    sqlite_service, token
):
    with sqlite_service.client(token) as api:
        first = wait_until_ended(api, submit(api, {"tasks": {"mem": alloc(500)}}))
        assert first["state"] == "succeeded", (first["message"], first["tasks"])
        [task] = first["tasks"]
        killed_gb = task["plan"]["memory_gb"]
        assert [a["oom_killed"] for a in task["attempts"]] == [True, False]
        assert [a["memory_gb"] for a in task["attempts"]] == [
            killed_gb,
            task["plan"]["retry_memory_gb"],
        ]

        def observed() -> list[dict]:
            rows = api.get("observations/", params={"task_type": "alloc"}).json()["results"]
            return len(rows) == 2 and rows

        rows = wait_for(observed, 30, "the kill and the retry's report to be observed")
        kill = next(r for r in rows if r["oom"])
        assert kill["limit_bytes"] == int(killed_gb * 2**30)

        second = wait_until_ended(api, submit(api, {"tasks": {"mem": alloc(500)}}))
    assert second["state"] == "succeeded", second
    [task] = second["tasks"]
    plan = task["plan"]
    assert plan["per_worker_gb"] >= killed_gb * sizing.BUMP
    assert plan["memory_gb"] * 1024 > 500
    assert [(a["attempt"], a["oom_killed"]) for a in task["attempts"]] == [(0, False)]
    assert f"kill × {sizing.BUMP:g}" in plan["why"]


def test_a_real_runs_page_and_api_show_what_it_used_and_wasted(sqlite_service):
    browser, token = logged_in(sqlite_service, "bea")
    with sqlite_service.client(token) as api:
        run = wait_until_ended(api, submit(api, {"tasks": {"mem": alloc(100)}}))
        assert run["state"] == "succeeded", run["message"]

        def observed() -> dict:
            usage = api.get(f"runs/{run['id']}/").json()["usage"]
            return usage["attempts"] >= 1 and usage

        usage = wait_for(observed, 30, "the run's attempts to be observed")
    plan = run["tasks"][0]["plan"]
    assert usage["used_gbh"] > 0 and usage["wasted_gbh"] == pytest.approx(usage["over_gbh"])
    assert usage["over_gbh"] > 0
    assert 0 < usage["maq"] < 1
    task = usage["tasks"]["mem"]
    assert task["allocated_gb"]["plan"] == plan["memory_gb"]
    assert set(task["allocated_gb"]) == {"plan", "simrun", "vpa"}
    assert "vpa" in task["counterfactual"]
    page = browser.get(f"/runs/{run['id']}/").text
    assert 'id="memory-use"' in page and 'data-usage-task="mem"' in page
    assert "GiB·s" in page or "GiB·h" in page


TOUCH = "import sys; block = b'x' * (int(sys.argv[1]) * 2**20)"


def test_a_plain_command_is_observed_by_its_measured_peak_and_the_next_run_plans_from_it(
    sqlite_service, token
):
    spec = {"name": "cmdloop", "tasks": {"mem": {"command": ["python", "-c", TOUCH, "200"]}}}
    with sqlite_service.client(token) as api:
        first = wait_until_ended(api, submit(api, spec))
        assert first["state"] == "succeeded", first["message"]

        def observed() -> list[dict]:
            params = {"task_type": "command:cmdloop/mem"}
            rows = api.get("observations/", params=params).json()["results"]
            return len(rows) == 1 and rows

        [row] = wait_for(observed, 30, "the command's peak to be observed")
        assert not row["oom"] and 200 * 2**20 <= row["peak_bytes"] < 2**30
        second = wait_until_ended(api, submit(api, spec))
    assert second["state"] == "succeeded", second["message"]
    before, after = first["tasks"][0]["plan"], second["tasks"][0]["plan"]
    assert "1 observation" in after["why"] and after["why"] != before["why"], after["why"]
