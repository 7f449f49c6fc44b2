"""The suite's tiers hold: no test imports a conftest file, and the harness's tier (the root
conftest, tests/harness, its helpers and its tests) imports nothing of the service, read from
the source."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SERVICE = ("runs", "simrun_site", "django", "rest_framework", "kubernetes", "celpy")
"""Top-level packages only ``pip install -e '.[dev]'`` brings."""
HARNESS_TIER = ("tests.harness", "tests.polling", "tests.floods")
"""The modules of the suite the harness's tier may import."""


def imports_of(path: Path) -> Iterator[str]:
    """The modules a file imports, anywhere in it; a relative import as ``.name``."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield "." * node.level + (node.module or "")


def test_no_test_module_imports_a_conftest_file() -> None:
    found = {
        f"{path.relative_to(TESTS)}: {name}"
        for path in TESTS.rglob("*.py")
        for name in imports_of(path)
        if name.split(".")[-1] == "conftest"
    }
    assert not found


def test_the_root_conftest_and_the_harness_tier_need_nothing_of_the_service() -> None:
    shared = [TESTS / f"{name.removeprefix('tests.')}.py" for name in HARNESS_TIER[1:]]
    files = [TESTS / "conftest.py", *shared, *(TESTS / "harness").glob("*.py")]
    found = {
        f"{path.relative_to(TESTS)}: {name}"
        for path in files
        for name in imports_of(path)
        if name.split(".")[0] in SERVICE
        or (name.startswith("tests.") and not name.startswith(HARNESS_TIER))
    }
    assert not found


GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("n", range(6))
def test_grouped(n):
    with open(os.environ["WORKERS_SEEN"], "a") as seen:
        seen.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("n", range(6))
def test_free(n):
    pass
"""


def test_a_parallel_run_keeps_a_group_on_one_worker(tmp_path: Path) -> None:
    """The README's ``--dist loadgroup`` keeps the tests that share a service or the one Slurm on
    one worker; pytest 9.2 broke that silently (pytest-xdist #1386), so pyproject.toml pins
    below it, and this test says when an upgrade breaks it again."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    seen = tmp_path / "seen"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "2", "--dist", "loadgroup"]
        + ["-p", "no:cacheprovider", "-q", str(tmp_path)],
        cwd=tmp_path,
        # xdist alone: the suite's other plugins (schemathesis, playwright) cost each of the
        # three processes seconds of imports.
        env={**os.environ, "WORKERS_SEEN": str(seen), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = seen.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
