"""``simrun submit --follow`` against the real service (``simrun serve``), as a user runs it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.service import CONFIGURATION, SIMRUN, Service

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parents[2] / "docs" / "examples" / "demo.yaml"
FAILING = """name: fails
tasks:
  sweep: {type: squares, settings: {n: 20, delay_s: 0.05, fail_unit: 7}}
"""


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    started = Service(home=tmp_path_factory.mktemp("cli") / "home")
    started.start()
    yield started
    assert started.stop() == 0


@pytest.fixture(scope="module")
def simrun(service, tmp_path_factory):
    token = service.user("alice")
    config = tmp_path_factory.mktemp("config")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
        env |= {"SIMRUN_URL": service.url, "SIMRUN_TOKEN": token, "XDG_CONFIG_HOME": str(config)}
        return subprocess.run(
            [SIMRUN, *args], env=env, capture_output=True, text=True, timeout=300, check=False
        )

    return run


def test_the_example_sweep_followed_to_success_exits_0(simrun):
    done = simrun("submit", str(DEMO), "--follow")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split()[:2] == ["sweep", "done"] for line in lines)
    assert any(line.split()[:3] == ["report", "done", "1/1"] for line in lines)
    assert " succeeded after " in lines[-1]


def test_a_run_whose_unit_raises_followed_to_its_failure_exits_1(simrun, tmp_path):
    spec = tmp_path / "fails.yaml"
    spec.write_text(FAILING)
    done = simrun("submit", str(spec), "--follow")
    assert done.returncode == 1
    last = done.stdout.splitlines()[-1]
    assert " failed after " in last and "unit 7 failed" in last
    assert "Traceback" not in done.stderr
