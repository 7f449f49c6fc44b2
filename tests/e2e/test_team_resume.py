"""Resume under a real ``simrun serve`` run as root with task users: the units a cancelled
sweep finished are copied in as the service's, the folders its new workers write are its
task user's, and the resumed run computes only the rest."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.service import Service, submit, task_user_serve, wait_until_ended
from tests.polling import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 340000
UNITS = 60
FIRST = UNITS // 3
FLAG = "flags/go"
"""The flag's path in the store: the sweep's units from ``FIRST`` on wait for it, so the
cancel always finds exactly the units below ``FIRST`` done, however slow the machine. The
line reaches it through the task's folder: a file the line names by its path is part of the
task's key, and the flag made between the runs would make the resumed task another."""
FLAGGED = f'"$SIMRUN_TASK_DIR/../../../../{FLAG}"'
WAIT = f"[ {{U}} -lt {FIRST} ] || until [ -e {FLAGGED} ]; do sleep 0.05; done"
SWEEP = {
    "tasks": {
        "sim": {
            "command": ["sh", "-c", WAIT + '; echo "{{\\"v\\": $(({U}*{U}))}}" > {out}/r.json'],
            "sweep": {"U": {"range": [0, UNITS]}},
            "results": "r.json",
            "cores": 1,
        }
    }
}


@pytest.fixture
def team() -> Iterator[Service]:
    """A serve as root with task users, its home and its Python within their reach."""
    with task_user_serve(UID_BASE) as service:
        yield service


def progress(folder: Path) -> Counter[int]:
    path = folder / "progress.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(json.loads(line)["unit"] for line in lines if line.endswith("}"))


def test_a_cancelled_sweep_resumed_under_task_users_computes_only_what_it_had_not(team):
    flag = team.store / FLAG  # a task's /tmp is its own: the store stays visible
    flag.parent.mkdir(mode=0o755)
    with team.client(team.user("alice")) as alice:
        source = submit(alice, SWEEP)
        folder = team.store / "runs" / source / "tasks" / "sim"
        wait_for(lambda: set(progress(folder)) == set(range(FIRST)), 120, "the first units")
        assert alice.post(f"runs/{source}/cancel/").status_code == 202
        assert wait_until_ended(alice, source)["state"] == "cancelled"
        wait_for(lambda: not list((folder / "logs").glob("*.pid")), 60, "its processes to end")
        flag.touch()

        answer = alice.post("runs/", params={"resume_of": source})
        assert answer.status_code == 201, answer.text
        run = wait_until_ended(alice, answer.json()["id"])

    assert run["state"] == "succeeded", (run["message"], run["tasks"])
    [task] = run["tasks"]
    reused = task["units_reused"]
    assert task["reused_from"] == {"run": source, "task": "sim"} and reused == FIRST
    resumed = team.store / "runs" / run["id"] / "tasks" / "sim"
    computed = progress(resumed)
    assert len(computed) == UNITS - reused and set(computed.values()) == {1}
    assert not set(computed) & set(progress(folder))
    units = resumed / "out" / "units"
    service, user = os.geteuid(), UID_BASE + 1  # alice is the first user
    owners = {unit: (units / str(unit) / "r.json").stat().st_uid for unit in range(UNITS)}
    assert {owners[u] for u in range(UNITS) if u not in computed} == {service}
    assert {owners[u] for u in computed} == {user}
    assert units.stat().st_uid == user and (resumed / "units" / "reused").stat().st_uid == service
    table = (resumed / "out" / "results.csv").read_text().splitlines()
    header = table[0].split(",")
    assert [int(row.split(",")[header.index("v")]) for row in table[1:]] == [
        u * u for u in range(UNITS)
    ]
