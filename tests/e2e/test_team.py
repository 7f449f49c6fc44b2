"""``simrun serve`` shared by a team, as root: two users, one staff; neither user's task
reaches the service's secrets or the other's runs, and each sees what it should."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.backends.local import user as local_user
from tests.e2e.service import SIMRUN, Service, run_of, submit, wait_until_ended

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 310000


@pytest.fixture
def team() -> Iterator[Service]:
    """A serve whose home every task user may cross (not pytest's root-only folders)."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    service = Service(home=base / "home", extra_env={"SIMRUN_TASK_UID_BASE": str(UID_BASE)})
    service.start()
    yield service
    if service.process is not None:
        service.stop()
    shutil.rmtree(base, ignore_errors=True)


def make_user(service: Service, name: str, *extra: str) -> str:
    done = subprocess.run(
        [SIMRUN, "user", name, *extra],
        env=service.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split("token: ")[1].split()[0]


def probe(paths: list[Path]) -> list[str]:
    """A command that says why it cannot read each path (or READ), then who it runs as."""
    tries = [f'cat "{p}" 2>&1 >/dev/null | grep -o "Permission denied" || echo READ' for p in paths]
    return ["sh", "-c", "; ".join([*tries, 'echo "uid $(id -u)"'])]


def reachable(service: Service, other_run: str, serve_pid: int) -> list[Path]:
    """What no task may read: the service's files and environment, another user's run."""
    home, other = service.home, service.store / "runs" / other_run
    return [
        home / "simrun.sqlite3",
        home / "secret_key",
        home / "broker.sqlite3",
        Path(f"/proc/{serve_pid}/environ"),
        other / "run.json",
        other / "tasks" / "data" / "out" / "secret",
        other / "tasks" / "data" / "logs" / "data-0.log",
        other / "tasks" / "data" / "logs" / "data-0.launch",
    ]


def log(service: Service, run_id: str, task: str) -> list[str]:
    path = service.store / "runs" / run_id / "tasks" / task / "logs" / f"{task}-0.log"
    return path.read_text().splitlines()


def test_two_users_tasks_reach_neither_the_services_secrets_nor_each_others_runs(team):
    alice = make_user(team, "alice")
    operator = make_user(team, "operator", "--staff")
    assert team.process is not None
    serve_pid = team.process.pid
    data = {"command": ["sh", "-c", 'echo private > "$SIMRUN_OUT/secret"']}
    sweep = {"type": "squares", "settings": {"n": 6}}

    with team.client(alice) as as_alice, team.client(operator) as as_operator:
        first = submit(as_alice, {"tasks": {"data": data}})
        ended = wait_until_ended(as_alice, first)
        assert ended["state"] == "succeeded", (ended["message"], ended["tasks"])
        second = submit(
            as_operator,
            {
                "tasks": {
                    "data": data,
                    "probe": {"command": probe(reachable(team, first, serve_pid))},
                }
            },
        )
        assert wait_until_ended(as_operator, second)["state"] == "succeeded"
        third = submit(
            as_alice, {"tasks": {"probe": {"command": probe(reachable(team, second, serve_pid))}}}
        )
        assert wait_until_ended(as_alice, third)["state"] == "succeeded"
        # The harness runs as the task user too, where the service's interpreter is reachable
        # (an image's /usr/local); below a folder only root passes, such a run is refused at
        # once (503) with the fix, never accepted to fail.
        problem = local_user.unreachable(Path(sys.executable).resolve())
        answer = as_alice.post("runs/", json={"tasks": {"sq": sweep}})
        if problem is None:
            assert answer.status_code == 201, answer.text
            harness = wait_until_ended(as_alice, answer.json()["id"])
            assert harness["state"] == "succeeded", harness["message"]
            mine = {first, third, harness["id"]}
        else:
            assert answer.status_code == 503, answer.text
            assert problem in answer.json()["detail"]
            mine = {first, third}

        assert as_alice.get(f"runs/{second}/").status_code == 404
        assert run_of(as_operator, first)["owner"] == "alice"  # staff see every run
        listed = {r["id"] for r in as_alice.get("runs/").json()["results"]}
        assert listed == mine  # not the operator's

    for run_id, other, who in ((second, first, "operator"), (third, second, "alice")):
        lines = log(team, run_id, "probe")
        assert lines[:-1] == ["Permission denied"] * len(reachable(team, other, serve_pid))
        assert UID_BASE < int(lines[-1].removeprefix("uid ")) < UID_BASE + 100, who
    assert log(team, second, "probe")[-1] != log(team, third, "probe")[-1]
