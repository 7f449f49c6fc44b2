"""Issue 35's rows about users, code and shares, against a real ``simrun serve`` run as root
with task users, from a Python every task user may run (``task_user_serve``): sources work
under task users, and one user's code, uploads and runs spend no one else's share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from runs.client.packing import pack
from tests.e2e.service import Service, run_of, run_processes, task_user_serve, wait_until_ended
from tests.polling import wait_for
from tests.walkthrough import write_plugin_package

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 350000


@pytest.fixture(scope="module")
def team() -> Iterator[Service]:
    """A serve as root with task users, its home and its Python within their reach."""
    with task_user_serve(
        UID_BASE, SIMRUN_LEARN_INSTALL_S="20", SIMRUN_LOCAL_CORES="2", SIMRUN_USER_QUEUED_RUNS="18"
    ) as service:
        yield service


@pytest.fixture(scope="module")
def alice(team: Service) -> Iterator[httpx.Client]:
    with team.client(team.user("alice")) as client:
        yield client


@pytest.fixture(scope="module")
def bob(team: Service) -> Iterator[httpx.Client]:
    with team.client(team.user("bob")) as client:
        yield client


def upload(client: httpx.Client, tree: Path) -> httpx.Response:
    return client.post(
        "snapshots/",
        params={"name": tree.name},
        content=pack(tree),
        headers={"Content-Type": "application/gzip"},
    )


def submitted(client: httpx.Client, spec: dict) -> str:
    """A run's id, whether its submission was answered at once (201) or learns first (202)."""
    answer = client.post("runs/", json=spec)
    assert answer.status_code in {201, 202}, answer.text
    return str(answer.json()["id"])


def test_a_type_shipped_in_sources_runs_as_its_owners_task_user(team, alice, tmp_path):
    uploaded = upload(alice, write_plugin_package(tmp_path))
    assert uploaded.status_code == 201, uploaded.text
    spec = {
        "tasks": {"tally": {"type": "tally", "settings": {"word": "two"}}},
        "sources": [uploaded.json()["id"]],
    }

    run = wait_until_ended(alice, submitted(alice, spec))

    assert run["state"] == "succeeded", run
    out = team.store / "runs" / run["id"] / "tasks" / "tally" / "out" / "tally.txt"
    assert out.read_text() == "two\n"
    assert out.stat().st_uid == UID_BASE + 1  # alice is the first user


LEAVING_BUILD = """import json, os, tempfile
from pathlib import Path
left = tempfile.mkdtemp(prefix="simrun-left-")  # as a build killed at its timeout leaves
told = {"tmp": tempfile.gettempdir(), "left": left}
Path(SEEN, f"{os.getpid()}.json").write_text(json.dumps(told))
from setuptools import setup
setup()
"""
"""A setup.py that says where its temporary files go, and leaves a folder there: its
learning's build and the run's own venv's each run it."""


def test_a_builds_temporary_files_stay_in_the_store_and_go_with_its_learning(team, alice, tmp_path):
    """The learning's folder is the service's: a task user's tempfile, finding it closed,
    fell back to the machine's /tmp, outside every budget, where a killed build's files
    stayed."""
    # In the machine's /run: a build's /tmp is its own (the wall's), and the store read-only
    # to it but for its own folders (shm.fence).
    seen = Path(tempfile.mkdtemp(prefix="simrun-seen-", dir="/run"))
    seen.chmod(0o777)
    package = write_plugin_package(tmp_path)
    (package / "setup.py").write_text(f"SEEN = {str(seen)!r}\n" + LEAVING_BUILD)
    spec = {
        "tasks": {"tally": {"type": "tally", "settings": {"word": "two"}}},
        "sources": [upload(alice, package).json()["id"]],
    }

    run = wait_until_ended(alice, submitted(alice, spec))

    builds = [json.loads(path.read_text()) for path in seen.glob("*.json")]
    shutil.rmtree(seen, ignore_errors=True)
    assert run["state"] == "succeeded", run
    assert all(Path(told["tmp"]).is_relative_to(team.home) for told in builds), builds
    learning = [b for b in builds if Path(b["tmp"]).is_relative_to(team.store / "learned-types")]
    assert learning and not any(os.path.lexists(told["left"]) for told in learning), builds


SLEEPING_BUILD = "import time\ntime.sleep(40)\n"
"""A setup.py whose build sleeps (less than the learning's budget, so no process outlives
the test by much): 16 submissions of it held every web thread, for everyone."""


def test_sixteen_sleeping_builds_hold_neither_the_web_nor_the_loop(team, alice, bob, tmp_path):
    package = write_plugin_package(tmp_path)
    (package / "setup.py").write_text(SLEEPING_BUILD)
    digest = upload(alice, package).json()["id"]
    spec = {"tasks": {"t": {"type": "tally", "settings": {"word": "x"}}}, "sources": [digest]}

    answers = [alice.post("runs/", json=spec) for _ in range(16)]
    with httpx.Client(base_url=str(bob.base_url), headers=bob.headers, timeout=10) as quick:
        listed = quick.get("runs/")
        page = quick.get(f"{team.url}/login/")
        other = wait_until_ended(bob, submitted(bob, {"tasks": {"c": {"command": ["true"]}}}))

    assert [a.status_code for a in answers] == [202] * 16, answers[-1].text
    assert {a.json()["state"] for a in answers} == {"learning"}
    assert listed.status_code == 200 and page.status_code == 200
    assert other["state"] == "succeeded", other
    print(
        "figures: the slowest of 16 submissions answered in "
        f"{max(a.elapsed.total_seconds() for a in answers):.3f} s, the list then in "
        f"{listed.elapsed.total_seconds():.3f} s, the login page in "
        f"{page.elapsed.total_seconds():.3f} s"
    )
    first = answers[0].json()["id"]
    failed = wait_until_ended(alice, first, timeout_s=120)
    assert failed["state"] == "failed"
    assert "did not end within 20 s" in failed["message"], failed["message"]
    for answer in answers[1:]:
        assert alice.post(f"runs/{answer.json()['id']}/cancel/").status_code == 202
    for answer in answers[1:]:  # ended before the next test: the module's service is shared
        assert wait_until_ended(alice, answer.json()["id"], timeout_s=120)["state"] == "cancelled"


@pytest.fixture(scope="module")
def operator(team: Service) -> Iterator[httpx.Client]:
    done = subprocess.run(
        [team.simrun, "user", "operator", "--staff"],
        env=team.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    with team.client(done.stdout.split("token: ")[1].split()[0]) as client:
        yield client


def test_staffs_re_run_of_a_users_run_runs_as_that_user_never_as_staff(alice, operator, team):
    whoami = {"command": ["sh", "-c", 'id -u > "$SIMRUN_OUT/uid"']}
    source = wait_until_ended(alice, submitted(alice, {"tasks": {"who": whoami}}))

    answer = operator.post(f"runs/{source['id']}/rerun/")

    assert answer.status_code == 201, answer.text
    again = wait_until_ended(operator, answer.json()["id"])
    assert again["state"] == "succeeded", again
    assert (again["owner"], again["submitted_by"]) == ("alice", "operator")
    out = team.store / "runs" / again["id"] / "tasks" / "who" / "out" / "uid"
    first = team.store / "runs" / source["id"] / "tasks" / "who" / "out" / "uid"
    assert out.read_text() == first.read_text()  # alice's task user, not the operator's


def until(flag: Path) -> list[str]:
    """A command that waits for ``flag`` (a file the test makes), then ends."""
    return ["sh", "-c", f'while [ ! -e "{flag}" ]; do sleep 0.05; done']


def task_of(client: httpx.Client, run_id: str) -> dict:
    return run_of(client, run_id)["tasks"][0]


def test_four_runs_taking_every_core_let_another_users_task_through_at_their_first_end(
    team, alice, bob, operator
):
    flags = team.store / "flags"  # a task's /tmp is its own: the store stays visible
    flags.mkdir(mode=0o755, parents=True)
    wide = [
        submitted(alice, {"tasks": {"wide": {"command": until(flags / str(i)), "cores": 2}}})
        for i in range(4)
    ]
    # The worker submits the four at once: whichever reaches the machine first runs first.
    first = wait_for(
        lambda: next((r for r in wide if task_of(alice, r)["state"] == "running"), None),
        300,
        "one of alice's runs to start",
        details=lambda: (
            f"{[run_of(operator, r) for r in wide]}\n{team.log.read_text(errors='replace')[-4000:]}"
        ),
    )
    others = [r for r in wide if r != first]
    small = submitted(bob, {"tasks": {"small": {"command": ["true"], "cores": 1}}})
    waits = wait_for(lambda: task_of(bob, small)["message"], 60, "bob's task to say why it waits")
    second = wait_for(lambda: task_of(alice, others[0])["message"], 60, "alice's second to wait")
    seen_by_staff = task_of(operator, small)["message"]

    released = time.monotonic()
    (flags / str(wide.index(first))).touch()
    ended = wait_until_ended(bob, small)
    waited = time.monotonic() - released
    for i in range(4):
        (flags / str(i)).touch()
    for run_id in wide:
        wait_until_ended(alice, run_id)
    bob_started = datetime.fromisoformat(task_of(bob, small)["started_at"])
    next_started = min(datetime.fromisoformat(task_of(alice, r)["started_at"]) for r in others)

    print(f"figures: bob's one-core task ended {waited:.1f} s after alice's first run did")
    assert ended["state"] == "succeeded", ended
    assert bob_started < next_started  # bob's turn came before alice's second run
    assert waits == "waits for 1 core; other users' runs hold 2 of 2", waits
    assert first not in waits
    assert second == f"waits for 2 cores; run {first} holds 2 of 2", second
    assert seen_by_staff == f"waits for 1 core; run {first} holds 2 of 2", seen_by_staff


def test_a_submission_past_the_users_queue_is_refused_naming_the_bound(team, bob):
    hold = {"tasks": {"h": {"command": until(team.home.parent / "never"), "cores": 2}}}
    ids = [submitted(bob, hold) for _ in range(18)]

    refused = bob.post("runs/", json=hold)
    for run_id in ids:
        assert bob.post(f"runs/{run_id}/cancel/").status_code == 202

    assert refused.status_code == 429, refused.text
    assert "SIMRUN_USER_QUEUED_RUNS" in refused.json()["detail"]
    # Ended, so no held task outlives the module's serve (its processes would go on).
    assert {wait_until_ended(bob, run_id)["state"] for run_id in ids} == {"cancelled"}
    wait_for(
        lambda: not any(run_processes(team.store, run_id) for run_id in ids),
        60,
        "the cancelled runs' processes to end",
    )
