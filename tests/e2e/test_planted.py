"""Issue 35's rows about what the control loop reads of what a task wrote, against a real root
``simrun serve`` with task users at its default budgets: a split task's folder holds a sparse
5 GB ``progress.jsonl`` or 3,000 sparse 16 MiB reports, and another user's trivial runs must
not notice. A task of the run can no longer write there (its run's folder but its own is
read-only to it: ``shm.fence``, issue 45), but the split task's own code can, a type of its
owner's sources: the test plants them as that code would, while the sweep runs.

On the code before the incremental reads (397dc61) the loop read the planted progress from byte
0 at every poll (5 GB of RSS a pass; the other user's run took 18.6 s instead of 1.4 s) and every
report whole, again at every pass (78 s instead of 2.3 s). The tests print the figures and hold
the loop's peak memory and what it read to bounds; they assert no time.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.service import (
    Service,
    run_of,
    service_processes,
    submit,
    task_user_serve,
    wait_until_ended,
)
from tests.polling import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks change users only under a root service"),
]
UID_BASE = 380000
GROWTH_MB = 400
"""The most the loop's processes may grow while a task's plant is read: the planted files are
5 GB and 47 GB."""
READ_MB = 1024
"""The most the service's processes may read meanwhile (a poll reads at most
``SIMRUN_PROGRESS_READ_MB`` of progress, a task's reports at most ``SIMRUN_REPORTS_READ_MB``)."""


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    with task_user_serve(UID_BASE, SIMRUN_POLL_S="1", SIMRUN_LOCAL_CORES="3") as service:
        yield service


@pytest.fixture(scope="module")
def mallory(service: Service) -> Iterator[httpx.Client]:
    with service.client(service.user("mallory")) as api:
        yield api


@pytest.fixture(scope="module")
def alice(service: Service) -> Iterator[httpx.Client]:
    with service.client(service.user("alice")) as api:
        yield api


def peak_rss_mb(service: Service) -> float:
    """The largest high-water mark of resident memory of a process of the service (the web,
    the Celery worker and its pool, the local step), in MiB."""
    assert service.process is not None
    peaks = [0]
    for pid in service_processes(service.process.pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]))
    return max(peaks) / 1024


def read_mb(service: Service) -> float:
    """What the processes of the service have read (``rchar``: every byte a read returned,
    a sparse file's zeros too), in MiB."""
    assert service.process is not None
    total = 0
    for pid in service_processes(service.process.pid):
        with contextlib.suppress(OSError, StopIteration):
            lines = Path(f"/proc/{pid}/io").read_text().splitlines()
            total += int(next(line for line in lines if line.startswith("rchar:")).split()[1])
    return total / 2**20


def trivial(alice: httpx.Client) -> float:
    """Alice's trivial run to its end; its seconds."""
    started = time.monotonic()
    run = wait_until_ended(alice, submit(alice, {"tasks": {"t": {"command": ["true"]}}}))
    assert run["state"] == "succeeded", run
    return time.monotonic() - started


SWEEP = {"type": "squares", "settings": {"n": 10**7, "delay_s": 1}, "workers": 1}
"""A split task that runs as long as the test needs it, 512 bytes a unit of progress allowed
(5 GB), as the attack had it."""


def plant_progress(sweep: Path) -> None:
    """A sparse 5 GB progress.jsonl in the sweep's folder: zeros the loop has to pass over."""
    wait_for(lambda: (sweep / "progress.jsonl").exists(), 120, "the sweep's progress")
    with open(sweep / "progress.jsonl", "ab") as planted:
        planted.truncate(5 * 10**9)


def plant_reports(sweep: Path) -> None:
    """3,000 sparse reports of 16 MiB in the sweep's folder, named as later attempts' would be."""
    workers = sweep / "workers"
    workers.mkdir(exist_ok=True)
    for i in range(3000):
        with open(workers / f"sweep-w0-{100 + i}.json", "wb") as planted:
            planted.truncate(16 * 2**20)


def planted(
    service: Service, mallory: httpx.Client, alice: httpx.Client, plant: Callable[[Path], None]
) -> None:
    """Alice's trivial run before, then while mallory's sweep runs with ``plant`` read by the
    loop at every poll; the figures, and the loop's growth held to ``GROWTH_MB``."""
    before_s, before_mb, read_before = trivial(alice), peak_rss_mb(service), read_mb(service)
    run_id = submit(mallory, {"tasks": {"sweep": SWEEP}})
    try:

        def running() -> bool:
            state = {t["id"]: t["state"] for t in run_of(mallory, run_id)["tasks"]}
            return state.get("sweep") not in {"waiting", "queued"}

        wait_for(running, 120, "the sweep to run")
        plant(service.store / "runs" / run_id / "tasks" / "sweep")
        states = {t["id"]: t for t in run_of(mallory, run_id)["tasks"]}
        assert states["sweep"]["state"] == "running", states["sweep"]
        during = [trivial(alice) for _ in range(3)]
    finally:
        mallory.post(f"runs/{run_id}/cancel/")
        wait_until_ended(mallory, run_id)
    after_s = trivial(alice)  # the sweep's end: its reports read
    after_mb, read = peak_rss_mb(service), read_mb(service) - read_before
    print(
        f"\nfigures: alice's trivial run {before_s:.1f} s before the plant, "
        f"{', '.join(f'{s:.1f}' for s in during)} s while it is read, {after_s:.1f} s after "
        f"the sweep's end; the service's largest peak RSS {before_mb:.0f} MiB before, "
        f"{after_mb:.0f} MiB after; the service read {read:.0f} MiB meanwhile"
    )
    assert after_mb - before_mb < GROWTH_MB
    assert read < READ_MB


def test_a_sparse_5_gb_progress_file_costs_the_loop_a_bounded_read(service, mallory, alice):
    planted(service, mallory, alice, plant_progress)


def test_3000_sparse_16_mib_reports_cost_the_loop_a_bounded_read(service, mallory, alice):
    planted(service, mallory, alice, plant_reports)
