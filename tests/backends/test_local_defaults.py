"""The local backend's defaults: its cores from the CPUs this process may run on,
its memory from the machine's, the venvs of its runs beside the scratch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, os, sys
from pathlib import Path
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # as taskset -c N simrun serve
from runs.backends.local.backend import LocalBackend
backend = LocalBackend(Path(sys.argv[1]) / "store", Path(sys.argv[1]) / "scratch")
print(json.dumps({"cores": backend.cores, "memory_gb": backend.memory_gb,
                  "envs": str(backend.envs), "max_cores": backend.max_cores}))
"""


def meminfo_total_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024 / 2**30
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_by_default_the_cores_are_the_affinitys_the_memory_the_machines_envs_beside_scratch(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
    )
    seen = json.loads(done.stdout)
    assert seen["cores"] == seen["max_cores"] == 1  # not the machine's cpu_count()
    assert abs(seen["memory_gb"] - meminfo_total_gb()) < 1 / 1024  # to a MiB
    assert seen["envs"] == str(tmp_path / "home" / "envs")
