"""Memory evidence: the pool size, anonymous memory of a cgroup or a process tree, CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness import cgroups
from harness.errors import ConfigurationError
from harness.memory import (
    GIB,
    MemorySampler,
    descendants,
    memory_source,
    process_tree_anon,
    processes,
)
from harness.report import WorkerReport, cpu_seconds
from tests.harness.processes import clean_environ, finish, spawn
from tests.harness.task_dirs import make_task, report_of
from tests.polling import wait_for

from .cgroup import child_cgroup

MIB = 1 << 20
ALLOCATE = """
import sys
print("ready", flush=True)
sys.stdin.readline()
block = bytearray({mb} << 20)
for offset in range(0, len(block), 4096):
    block[offset] = 1
print("allocated", flush=True)
sys.stdin.readline()
"""


# -- processes() ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "memory_gb", "base_gb", "per_worker_gb", "expected"),
    [
        (4, None, 0.5, 1.0, 4),  # no limit: the cores
        (0, None, 0.5, 1.0, 1),  # at least one
        (8, 4.0, 1.0, 1.0, 3),  # the memory allows fewer than the cores
        (2, 4.0, 1.0, 1.0, 2),  # the cores allow fewer than the memory
        (4, 1.5, 0.5, 1.0, 1),  # exactly one fits
        (4, 0.3, 0.1, 0.1, 2),  # (0.3 - 0.1) / 0.1 is 1.9999… in floating point
        (4, 2.9, 1.0, 1.0, 1),  # floor, not round
    ],
)
def test_processes_fit_the_cores_and_the_memory(
    cores: int, memory_gb: float | None, base_gb: float, per_worker_gb: float, expected: int
) -> None:
    memory = None if memory_gb is None else round(memory_gb * GIB)

    assert processes(cores, memory, base_gb, per_worker_gb) == expected


@pytest.mark.parametrize(("memory_gb", "base_gb"), [(1.4, 0.5), (0.4, 0.5), (0.0, 0.0)])
def test_processes_refuse_a_memory_too_small_for_one(memory_gb: float, base_gb: float) -> None:
    with pytest.raises(ValueError, match="fit no process"):
        processes(4, round(memory_gb * GIB), base_gb, 1.0)


def test_processes_need_a_positive_memory_per_process() -> None:
    with pytest.raises(ValueError, match="positive"):
        processes(4, GIB, 0.0, 0.0)


# -- sources of memory ---------------------------------------------------------------------


def test_the_memory_source_is_the_cgroup_unless_the_process_tree_is_asked() -> None:
    assert memory_source({}) == "cgroup"
    assert memory_source({"SIMRUN_MEMORY_SOURCE": "process"}) == "process"
    with pytest.raises(ConfigurationError, match="cgroup or process"):
        memory_source({"SIMRUN_MEMORY_SOURCE": "rss"})


def _allocator(mb: int, **kw: object) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", ALLOCATE.format(mb=mb)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def _step(process: subprocess.Popen[str]) -> str:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("\n")
    process.stdin.flush()
    return process.stdout.readline()


def test_the_process_tree_sampler_sees_a_childs_allocation_within_10_percent() -> None:
    sampler = MemorySampler("process")
    child = _allocator(100)
    try:
        before = sampler.sample()
        assert _step(child) == "allocated\n"
        after = sampler.sample()
    finally:
        _step(child)
        child.wait()
    assert before is not None and after is not None
    assert abs((after - before) - 100 * MIB) <= 10 * MIB
    assert sampler.peak == after


def test_the_anonymous_memory_of_a_process_is_none_once_it_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()

    assert process_tree_anon(child.pid) is None
    assert process_tree_anon(os.getpid()) > 0  # type: ignore[operator]


SAMPLE_IN_CGROUP = """
import json
from harness.memory import MemorySampler
sampler = MemorySampler("cgroup")
before = sampler.sample()
block = bytearray(100 << 20)
for offset in range(0, len(block), 4096):
    block[offset] = 1
after = sampler.sample()
del block
print(json.dumps({"before": before, "after": after, "peak": sampler.peak}))
"""


def test_the_cgroup_sampler_sees_an_allocation_within_10_percent() -> None:
    with child_cgroup(1 * GIB) as group:
        seen = json.loads(group.python(SAMPLE_IN_CGROUP))
    assert abs((seen["after"] - seen["before"]) - 100 * MIB) <= 10 * MIB
    assert seen["peak"] == seen["after"]


def test_the_cgroup_sampler_leaves_the_page_cache_out(tmp_path: Path) -> None:
    script = f"""
import json, os
from harness.memory import MemorySampler
sampler = MemorySampler("cgroup")
before = sampler.sample()
with open({str(tmp_path / "big")!r}, "wb") as handle:
    for _ in range(100):
        handle.write(os.urandom(1 << 20))
print(json.dumps({{"before": before, "after": sampler.sample()}}))
"""
    with child_cgroup(1 * GIB) as group:
        seen = json.loads(group.python(script))
    assert seen["after"] - seen["before"] < 20 * MIB  # 100 MiB written, not counted


def test_cpu_seconds_include_the_children_reaped() -> None:
    before = cpu_seconds()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass",
        ],
        check=True,
    )

    assert cpu_seconds() - before >= 0.3


# -- peaks: the kernel's high-water marks ---------------------------------------------------


def _spike_worker(
    store: Path, logs: Path, name: str, hold_s: float, watch: bool
) -> tuple[int, WorkerReport]:
    """A worker whose one unit holds 100 MiB for ``hold_s`` in a child cgroup of its own; the
    largest charge less page cache the test saw (when it ``watch``es) and the report."""
    task_dir = make_task(
        store, "alloc", {"units": 1, "mb": 100, "hold_s": hold_s}, task=name, per_worker_gb=0.2
    )
    env = clean_environ(SIMRUN_TASK_DIR=str(task_dir), SIMRUN_ROLE="base", SIMRUN_CORES="1")
    seen = 0
    with child_cgroup(1 * GIB) as group:
        cgroup = cgroups.Cgroup(group.path, 1 if group.version == 1 else 2, group.path)
        usage = "memory.usage_in_bytes" if group.version == 1 else "memory.current"
        process = spawn("worker", env, logs / f"{name}.log", preexec_fn=group.enter)
        while watch and process.poll() is None:
            try:
                charged = int((group.path / usage).read_text())
            except (OSError, ValueError):
                continue
            seen = max(seen, charged - (cgroup.page_cache_bytes() or 0))
        code = finish(process, logs / f"{name}.log")
    assert code == 0, (logs / f"{name}.log").read_text()
    return seen, report_of(task_dir, f"{name}-w0")


def test_a_spike_of_100_mib_for_20_ms_is_reported_within_5_percent_of_its_true_peak(
    store: Path, logs: Path
) -> None:
    # The true peak: the same unit holding its 100 MiB for 2 s, watched all along.
    true_peak, held = _spike_worker(store, logs, "held", hold_s=2.0, watch=True)

    _, spike = _spike_worker(store, logs, "spike", hold_s=0.02, watch=False)

    assert spike.peak_source in ("cgroup-v1-max-usage", "cgroup-v2-peak")
    assert spike.peak_memory_bytes is not None and true_peak > 100 * MIB
    assert abs(spike.peak_memory_bytes - true_peak) <= 0.05 * true_peak, (
        spike.peak_memory_bytes / MIB,
        true_peak / MIB,
    )
    assert held.peak_source == spike.peak_source


def test_a_page_cache_that_grew_leaves_the_peak_to_the_samples(tmp_path: Path) -> None:
    script = f"""
import json, os
from harness.memory import MemorySampler
sampler = MemorySampler("cgroup")
sampler.sample()
with open({str(tmp_path / "big")!r}, "wb") as handle:
    for _ in range(100):
        handle.write(os.urandom(1 << 20))
sampler.sample()
peak, source = sampler.high_water()
print(json.dumps({{"peak": peak, "sampled": sampler.peak, "source": source}}))
"""
    with child_cgroup(1 * GIB) as group:
        seen = json.loads(group.python(script))

    # The cgroup's mark holds the 100 MiB of page cache the kernel would have reclaimed.
    assert seen["source"] == "sampled" and seen["peak"] == seen["sampled"] < 60 * MIB


SPIKE = """
import sys
block = bytearray(100 << 20)
for offset in range(0, len(block), 4096):
    block[offset] = 1
del block
print("freed", flush=True)
sys.stdin.readline()
"""


def test_the_process_tree_peak_keeps_a_spike_no_sample_saw() -> None:
    sampler = MemorySampler("process")
    sampler.sample()
    child = subprocess.Popen(
        [sys.executable, "-c", SPIKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "freed\n"
        sampler.sample()
    finally:
        child.communicate("\n")

    peak, source = sampler.high_water()
    assert source == "vmhwm"
    assert peak is not None and sampler.peak is not None
    assert peak - sampler.peak >= 90 * MIB  # the freed 100 MiB, which no sample saw


def test_the_descendants_of_a_process_are_its_threads_children_and_theirs_as_a_scan_finds():
    from harness.memory import _parents

    first = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    other: list[subprocess.Popen[bytes]] = []
    thread = threading.Thread(target=lambda: other.append(subprocess.Popen(["sleep", "30"])))
    thread.start()
    thread.join()
    try:
        wait_for(lambda: len(descendants(first.pid)) >= 2, 10, "the tree to start")
        parents = _parents(Path("/proc"))

        def scanned(pid: int) -> list[int]:
            below = parents.get(pid, [])
            return [p for child in below for p in (child, *scanned(child))]

        # Other tests' processes may come and go below this one: compare the tree this
        # test started, whose members live until it kills them.
        assert len(descendants(first.pid)) == 2
        assert sorted(descendants(first.pid)) == sorted(scanned(first.pid))
        ours = {first.pid, other[0].pid, *descendants(first.pid)}
        assert ours <= set(descendants(os.getpid())) and ours <= set(scanned(os.getpid()))
        assert other[0].pid in descendants(os.getpid())  # a child of another thread
    finally:
        for process in (first, *other):
            process.kill()
            process.wait()
