"""Issue 35's floods against a real ``simrun serve`` run as root with task users, its home on a
small disk of its own: one user's task floods what everyone shares, another user's runs before,
during and after it must not notice, and the flooding task fails naming its budget.

Each flood here filled the disk (or the inodes) on the code before its budget, and the other
user's run failed on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.service import SIMRUN, Service, logged_in, run_of, submit, wait_until_ended
from tests.floods import ext4
from tests.polling import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 330000
DISK_MB = 256
INODES = 40_000
BUDGETS = {
    "SIMRUN_TASK_FILES_MAX": "2000",
    "SIMRUN_USER_FILES_MAX": "3000",
    "SIMRUN_TASK_DISK_GB": str(32 / 1024),  # 32 MiB
    "SIMRUN_TASK_LOG_MB": "1",
    "SIMRUN_TASK_FILES_CHECK_S": "0.3",
    "SIMRUN_POLL_S": "1",
}
PYTHON = "/usr/bin/python3"
"""The machine's Python, which every task user may run (the test's lives below /root)."""


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    """A serve whose home is a small ext4 disk of its own, which every task user may cross."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    env = {"SIMRUN_TASK_UID_BASE": str(UID_BASE), **BUDGETS}
    try:
        with ext4(base / "disk", DISK_MB, "-O", "^has_journal", "-N", str(INODES)) as disk:
            disk.chmod(0o755)
            service = Service(home=disk / "home", extra_env=env)
            try:
                service.start()
                yield service
            finally:
                if service.process is not None:
                    service.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def mallory_browser(service: Service) -> Iterator[tuple[httpx.Client, str]]:
    browser, token = logged_in(service, "mallory")
    yield browser, token
    browser.close()


@pytest.fixture(scope="module")
def mallory(service: Service, mallory_browser) -> Iterator[httpx.Client]:
    with service.client(mallory_browser[1]) as api:
        yield api


@pytest.fixture(scope="module")
def alice(service: Service) -> Iterator[httpx.Client]:
    done = subprocess.run(
        [SIMRUN, "user", "alice"], env=service.env(), capture_output=True, text=True, check=True
    )
    with service.client(done.stdout.split("token: ")[1].split()[0]) as api:
        yield api


def sh(script: str) -> dict[str, list[str]]:
    return {"command": ["sh", "-c", script]}


def py(program: str) -> dict[str, list[str]]:
    return {"command": [PYTHON, "-c", program]}


def honest(alice: httpx.Client, script: str = 'echo fine > "$SIMRUN_OUT/a"') -> tuple[dict, float]:
    """Alice's run (a trivial one by default) to its end, and how long it took."""
    started = time.monotonic()
    run = ended(alice, {"t": sh(script)})
    return run, time.monotonic() - started


def ended(api: httpx.Client, tasks: dict) -> dict:
    return wait_until_ended(api, submit(api, {"tasks": tasks}))


def message(run: dict, task: str = "t") -> str:
    return next(t for t in run["tasks"] if t["id"] == task)["message"]


def free(service: Service) -> tuple[int, int]:
    """The free inodes and MiB of the service's disk."""
    found = os.statvfs(service.home)
    return found.f_favail, found.f_bavail * found.f_frsize // 2**20


def out_of(service: Service, run_id: str, task: str = "t") -> Path:
    return service.store / "runs" / run_id / "tasks" / task / "out"


def count(folder: Path) -> int:
    try:
        return sum(1 for _ in os.scandir(folder))
    except OSError:
        return 0


FLOOD = (
    "import os\n"
    "out = os.environ['SIMRUN_OUT']\n"
    "for i in range(10**6):\n"
    "    open(os.path.join(out, f'f{i}'), 'w').close()\n"
)
"""Empty files in out/ as fast as Python makes them, until something stops it."""

WATCH = (
    "import os, time\n"
    "out = os.environ['SIMRUN_OUT']\n"
    "start = os.statvfs(out).f_favail\n"
    "open(os.path.join(out, 'watching'), 'w').close()\n"
    "deadline = time.monotonic() + 120\n"
    "while os.statvfs(out).f_favail > start - 500:\n"
    "    assert time.monotonic() < deadline, 'no flood began in 120 s'\n"
    "    time.sleep(0.002)\n"
    "for i in range(100):\n"
    "    with open(os.path.join(out, f'a{i}'), 'w') as file:\n"
    "        file.write('fine')\n"
)
"""Alice's task: it says it watches, waits until 500 of the disk's inodes went (the flood has
begun: the flood lasts until its launcher next counts, a fraction of a second that a poll
from outside can miss on a loaded machine), then writes its own files."""


def test_a_flood_of_files_fails_naming_its_budget_and_nobody_else_notices(service, mallory, alice):
    inodes, _ = free(service)
    watcher = submit(alice, {"tasks": {"t": py(WATCH)}})
    wait_for(
        lambda: (out_of(service, watcher) / "watching").exists(),
        120,
        "alice's task to watch the disk",
        details=lambda: str(run_of(alice, watcher)),
    )
    started = time.monotonic()
    flood = submit(mallory, {"tasks": {"t": py(FLOOD)}})
    during = wait_until_ended(alice, watcher)
    during_s = time.monotonic() - started
    flooded = wait_until_ended(mallory, flood)
    after, after_s = honest(alice)

    print(f"\nfiles flood: alice's run {during_s:.1f} s during it, {after_s:.1f} s after")
    assert during["state"] == "succeeded", during["tasks"]
    assert after["state"] == "succeeded", after["message"]
    assert flooded["state"] == "failed"
    assert "SIMRUN_TASK_FILES_MAX" in message(flooded), flooded["tasks"]
    assert free(service)[0] > inodes - 500  # the flood's files are gone


def test_a_file_as_large_as_the_disk_is_cut_at_its_budget_by_the_kernel(service, mallory, alice):
    _, space = free(service)
    big = ended(mallory, {"t": sh('head -c 1G /dev/zero > "$SIMRUN_OUT/big"')})
    after, _ = honest(alice)

    assert after["state"] == "succeeded", after["message"]
    assert big["state"] == "failed"
    assert "SIMRUN_TASK_DISK_GB" in message(big), big["tasks"]
    assert free(service)[1] > space - 8


def test_a_task_printing_gigabytes_keeps_a_capped_log_and_nobody_else_notices(
    service, mallory, alice
):
    _, space = free(service)
    noisy = ended(mallory, {"t": sh("yes simrun | head -c 400M; echo done")})
    after, after_s = honest(alice)
    log = service.store / "runs" / noisy["id"] / "tasks" / "t" / "logs" / "t-0.log"
    text = log.read_bytes()

    assert after["state"] == "succeeded", after["message"]
    assert noisy["state"] == "succeeded", noisy["message"]  # printing is no failure
    assert len(text) <= 2**20 + 200
    assert text.startswith(b"simrun\nsimrun\n") and text.endswith(b"simrdone\n")  # head -c cut
    marker = next(line for line in text.splitlines() if line.startswith(b"[simrun]"))
    assert int(marker.split()[1]) > 390 * 2**20
    print(
        f"\nlog flood: {len(text) / 2**20:.2f} MiB kept, {int(marker.split()[1]) / 2**20:.0f} MiB "
        f"dropped; alice's run {after_s:.1f} s after it"
    )
    assert free(service)[1] > space - 4


def test_what_a_task_leaves_in_dev_shm_goes_with_it(service, mallory):
    name = f"simrun-e2e-{os.getpid()}"
    try:
        run = ended(mallory, {"t": sh(f"head -c 20M /dev/zero > /dev/shm/{name}")})
        assert run["state"] == "succeeded", run["message"]
        assert not Path("/dev/shm", name).exists()
    finally:
        Path("/dev/shm", name).unlink(missing_ok=True)


DEEP = "for _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
"""A chain of 3000 folders below the working folder (a Python program's lines)."""
PLANT = f"import os\nos.chdir(os.environ['HOME'])\n{DEEP}"
"""In its own scratch."""


def deep_tree(folder: Path, depth: int) -> None:
    """A chain of ``depth`` folders below ``folder``, made by descriptor."""
    fd = os.open(folder, os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def test_trees_3000_folders_deep_in_out_and_in_the_scratch_answer_too_deep_never_a_500(
    service, mallory, mallory_browser
):
    p = sh('echo result > "$SIMRUN_OUT/result.txt"')
    run = ended(mallory, {"p": p, "q": {**py(PLANT), "inputs": {"x": "p"}}})
    tasks = {t["id"]: t for t in run["tasks"]}
    # A tree in a done task's out/: no task can make one now (another task's folder is
    # read-only to it, its own is held to SIMRUN_TASK_DEPTH_MAX), but the store may hold one.
    deep_tree(service.store / "runs" / run["id"] / "tasks" / "p" / "out", 3000)
    outputs = mallory.get(f"runs/{run['id']}/tasks/p/outputs/")
    browser = mallory_browser[0]
    pages = [browser.get(f"/runs/{run['id']}/"), browser.get(f"/runs/{run['id']}/live/")]

    # The scratch's tree is over q's budget of depth; the launcher removed it all the same and
    # recorded the end: one attempt, not a lost one retried to attempt 10.
    assert tasks["q"]["state"] == "failed", tasks["q"]
    assert "SIMRUN_TASK_DEPTH_MAX" in tasks["q"]["message"]
    assert len(tasks["q"]["attempts"]) == 1, tasks["q"]["attempts"]
    assert not (service.home / "scratch" / run["id"]).exists()
    assert tasks["p"]["state"] == "done"
    assert outputs.status_code == 200
    assert [o["path"] for o in outputs.json()] == ["result.txt"]
    assert outputs.headers["Simrun-Listing-Cut"].startswith("too deep")
    for page in pages:
        assert page.status_code in (200, 286), page.text[-2000:]
        assert "too deep: folders more than 64 levels down" in page.text


def test_a_hard_link_to_a_root_only_file_in_the_run_s_folder_is_never_chowned(service, mallory):
    # As a task makes it where fs.protected_hardlinks is 0 (the test, root, makes it for it):
    # in task p's folder while p waits; then q's start hands the run's folder to mallory.
    victim = service.home.parent / "root-only"
    victim.write_text("the service's secret")
    victim.chmod(0o600)
    wait = sh('until [ -e "$SIMRUN_TASK_DIR/go" ]; do sleep 0.05; done')
    run_id = submit(mallory, {"tasks": {"p": wait, "q": {**sh("true"), "inputs": {"x": "p"}}}})
    folder = service.store / "runs" / run_id / "tasks" / "p"
    wait_for(lambda: (folder / "logs" / "p-0.pid").exists(), 60, "p to run")
    os.link(victim, folder / "hard")
    (folder / "go").touch()
    run = wait_until_ended(mallory, run_id)

    status = victim.stat()
    assert run["state"] == "succeeded", run["message"]
    assert (status.st_uid, status.st_gid, status.st_mode & 0o777) == (0, 0, 0o600)


def held(service: Service) -> int:
    """The files the running tasks of every user hold, as their launchers' counts say."""
    total = 0
    for entry in (service.store / "local" / "usage").glob("*/*.json"):
        try:
            total += json.loads(entry.read_text())["files"]
        except (OSError, ValueError, KeyError):
            continue  # replaced meanwhile, or gone with its task
    return total


def files(n: int) -> str:
    return f'i=0; while [ $i -lt {n} ]; do : > "$SIMRUN_OUT/f$i"; i=$((i+1)); done'


def test_two_tasks_of_a_user_each_within_its_budget_but_over_the_users_fail_the_second(
    service, mallory, alice
):
    # 1,600 files each, under a task's 2,000; mallory's running tasks may keep 3,000 together.
    # Before the user's budget both kept theirs: 3,200 files, and 50 runs' tasks every inode.
    hold = sh(f'{files(1600)}; until [ -e "$SIMRUN_TASK_DIR/go" ]; do sleep 0.05; done')
    first = submit(mallory, {"tasks": {"t": hold}})
    wait_for(lambda: held(service) >= 1600, 60, "the first task's count in its user's ledger")
    second = ended(mallory, {"t": sh(files(1600))})
    other, other_s = honest(alice, files(1600))  # alice keeps as much meanwhile
    (service.store / "runs" / first / "tasks" / "t" / "go").touch()
    kept = wait_until_ended(mallory, first)

    print(f"\nuser's budget: alice's run of 1,600 files {other_s:.1f} s beside mallory's task")
    assert second["state"] == "failed"
    assert "SIMRUN_USER_FILES_MAX" in message(second), second["tasks"]
    assert count(out_of(service, second["id"])) == 0  # what it wrote was removed
    assert other["state"] == "succeeded", other["message"]
    assert kept["state"] == "succeeded", kept["message"]  # what it held failed nothing
    assert held(service) == 0  # each count left with its task
