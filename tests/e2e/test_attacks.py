"""The attacks of issue 27 against a real ``simrun serve`` run as root with task users: a task
plants links and FIFOs where the service reads and writes, and none of them works.

Each task here is the attacker's command; what it must not reach is a root-only file beside
the service's home, the service's own secret key, and its own process's environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.service import SIMRUN, Service, submit, wait_until_ended
from tests.polling import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 320000
SECRET = "root-only: the attack worked if this line moved"


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    """A serve whose home every task user may cross, and a root-only file beside it."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    (base / "root-only").write_text(SECRET)
    (base / "root-only").chmod(0o600)
    (base / "root-folder").mkdir(mode=0o700)
    (base / "root-folder" / "key").write_text(SECRET)
    service = Service(home=base / "home", extra_env={"SIMRUN_TASK_UID_BASE": str(UID_BASE)})
    service.start()
    yield service
    if service.process is not None:
        service.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def mallory(service: Service) -> Iterator[httpx.Client]:
    done = subprocess.run(
        [SIMRUN, "user", "mallory"], env=service.env(), capture_output=True, text=True, check=True
    )
    token = done.stdout.split("token: ")[1].split()[0]
    with service.client(token) as client:
        yield client


def sh(script: str) -> dict[str, list[str]]:
    return {"command": ["sh", "-c", script]}


def ended(client: httpx.Client, spec: dict) -> dict:
    return wait_until_ended(client, submit(client, spec))


def test_a_log_planted_as_a_link_for_a_later_task_is_never_written_through(service, mallory):
    # A task of the run cannot write q's folder (it is read-only to p: shm.fence); the test
    # plants there as mallory's task user while p waits, as a task could where it may.
    target = service.home.parent / "root-only"
    wait = sh('until [ -e "$SIMRUN_TASK_DIR/go" ]; do sleep 0.05; done')
    run_id = submit(
        mallory, {"tasks": {"p": wait, "q": {**sh("echo appended by q"), "inputs": {"x": "p"}}}}
    )
    tasks = service.store / "runs" / run_id / "tasks"
    wait_for(lambda: (tasks / "p" / "logs" / "p-0.pid").exists(), 60, "p to run")
    owner = (tasks / "p").stat().st_uid
    (tasks / "q" / "logs").mkdir(parents=True, exist_ok=True)
    (tasks / "q" / "logs" / "q-0.log").symlink_to(target)
    for made in (tasks / "q" / "logs", tasks / "q" / "logs" / "q-0.log"):
        os.lchown(made, owner, owner)
    (tasks / "p" / "go").touch()
    run = wait_until_ended(mallory, run_id)

    assert target.read_text() == SECRET
    assert run["state"] == "succeeded", run["message"]


@pytest.mark.parametrize(
    ("target", "name"),
    [("home", "secret_key"), ("/proc/self", "environ"), ("root-folder", "key")],
)
def test_outputs_replaced_by_a_link_serve_nothing_behind_it(service, mallory, target, name):
    where = {
        "home": service.home,
        "root-folder": service.home.parent / "root-folder",
    }.get(target, Path(target))
    run = ended(
        mallory, {"tasks": {"t": sh(f'rm -rf "$SIMRUN_OUT" && ln -s {where} "$SIMRUN_OUT"')}}
    )
    run_id = run["id"]

    answer = mallory.get(f"runs/{run_id}/tasks/t/outputs/{name}")
    listing = mallory.get(f"runs/{run_id}/tasks/t/outputs/")

    assert answer.status_code == 404
    assert SECRET not in answer.text and "SECRET_KEY" not in answer.text
    assert listing.status_code == 200 and name not in listing.text


def test_staging_an_input_linked_to_a_root_only_folder_copies_nothing_of_it(service, mallory):
    folder = service.home.parent / "root-folder"
    reader = "cat inputs/x/key 2>&1 || true; echo b-ran"
    run = ended(
        mallory,
        {
            "tasks": {
                "a": sh(f'rm -rf "$SIMRUN_OUT" && ln -s {folder} "$SIMRUN_OUT"'),
                "b": {**sh(reader), "inputs": {"x": "a"}},
            }
        },
    )
    log = mallory.get(f"runs/{run['id']}/tasks/b/logs/b-0/")
    tasks = {t["id"]: t for t in run["tasks"]}

    assert log.status_code == 200, run
    assert SECRET not in log.text
    # b ran without the folder, or was refused its input, saying so; never silently skipped
    assert "b-ran" in log.text or "link" in tasks["b"]["message"], (log.text, tasks["b"])


def test_fifos_as_a_report_and_an_output_stall_neither_the_loop_nor_the_web(service, mallory):
    plant = 'mkdir -p "$SIMRUN_TASK_DIR/workers" && mkfifo "$SIMRUN_TASK_DIR/workers/t-0.json"'
    run = ended(mallory, {"tasks": {"t": sh(plant + ' && mkfifo "$SIMRUN_OUT/pipe.txt"')}})

    # The loop went on: the run ended. The web answers the FIFO at once, ten times over.
    assert run["state"] in {"succeeded", "failed"}, run
    with httpx.Client(base_url=str(mallory.base_url), headers=mallory.headers, timeout=10) as quick:
        for _ in range(10):
            assert quick.get(f"runs/{run['id']}/tasks/t/outputs/pipe.txt").status_code == 404
    second = ended(mallory, {"tasks": {"t": sh("echo fine")}})
    assert second["state"] == "succeeded"


def test_a_64_mib_body_is_refused_before_it_is_read(service, mallory):
    body = b"x" * (64 * 2**20)
    answer = mallory.post("runs/", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413


def test_thirty_wrong_passwords_lock_the_login(service):
    with httpx.Client(base_url=f"{service.url}/api/", timeout=30) as anonymous:
        answers = [
            anonymous.post("token/", json={"username": "mallory", "password": "wrong"})
            for _ in range(30)
        ]
    assert answers[-1].status_code == 429
    assert int(answers[-1].headers["Retry-After"]) > 0
