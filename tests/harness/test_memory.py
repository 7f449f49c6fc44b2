"""Memory evidence: the pool size, anonymous memory of a cgroup or a process tree, CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ConfigurationError
from harness.memory import (
    GIB,
    MemorySampler,
    memory_source,
    process_tree_anon,
    processes,
)
from harness.report import cpu_seconds

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
