"""Child memory cgroups for the tests: real limits and real OOM kills.

A child of this process's own memory cgroup (cgroup v1 memory controller, as on the CI
machines, or v2) with a memory limit; a process started with ``cgroup.enter`` as its
``preexec_fn`` lives in it from its first instruction. Where the machine allows no cgroup
(no controller, not root), ``child_cgroup`` skips the test and says why.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import cgroups


@dataclass(frozen=True)
class ChildCgroup:
    path: Path
    version: int

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def enter(self) -> None:
        """A ``preexec_fn``: move the starting process into the cgroup."""
        self.procs.write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        found = cgroups.Cgroup(self.path, 1 if self.version == 1 else 2, self.path).oom_kills()
        return found or 0

    def pids(self) -> list[int]:
        return [int(p) for p in self.procs.read_text().split()]

    def python(self, script: str) -> str:
        """Run a Python script in the cgroup; its output (it must exit 0)."""
        return subprocess.run(
            [sys.executable, "-c", script],
            preexec_fn=self.enter,
            capture_output=True,
            text=True,
            check=True,
        ).stdout


def _limit(directory: Path, version: int, limit_bytes: int) -> None:
    if version == 1:
        (directory / "memory.limit_in_bytes").write_text(str(limit_bytes))
        memsw = directory / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # no swap to escape into: the limit is the limit
            memsw.write_text(str(limit_bytes))
        (directory / "memory.swappiness").write_text("0")
    else:
        (directory / "memory.max").write_text(str(limit_bytes))
        swap = directory / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")


def _remove(group: ChildCgroup) -> None:
    deadline = time.monotonic() + 10
    while True:
        for pid in group.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.path.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextlib.contextmanager
def child_cgroup(limit_bytes: int) -> Iterator[ChildCgroup]:
    """A child memory cgroup of this process's with ``limit_bytes``; removed afterwards."""
    parent = cgroups.find("memory")
    if parent is None:
        pytest.skip("this machine allows no memory cgroup: none is mounted for this process")
    if parent.version == 2:
        controllers = (parent.path / "cgroup.subtree_control").read_text().split()
        if "memory" not in controllers:
            pytest.skip(
                f"this machine allows no child memory cgroup: {parent.path} does not delegate "
                "the memory controller to its children (cgroup v2 subtree_control)"
            )
    directory = parent.path / f"simrun-test-{secrets.token_hex(4)}"
    try:
        directory.mkdir()
    except OSError as error:
        pytest.skip(f"this machine allows no child memory cgroup under {parent.path}: {error}")
    group = ChildCgroup(directory, parent.version)
    try:
        _limit(directory, parent.version, limit_bytes)
        yield group
    finally:
        _remove(group)
