"""The harness runs in pods without the service: it never imports Django or the service."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import harness

FORBIDDEN = ("django", "runs", "simrun_site", "celery", "rest_framework")

PROBE = f"""
import importlib, sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {FORBIDDEN!r}:
            raise ImportError(f"the harness imported {{name}}")
        return None

sys.meta_path.insert(0, Refuse())
for name in sys.argv[1:]:
    importlib.import_module(name)
from harness.tasktypes import task_types
print(sorted(task_types()))
"""


def test_every_harness_module_imports_without_django_or_the_service() -> None:
    modules = [info.name for info in pkgutil.walk_packages(harness.__path__, prefix="harness.")]
    assert {"harness.worker", "harness.merge", "harness.execute", "harness.ledger"} <= set(modules)

    result = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    assert "'squares'" in result.stdout and "'csv-stats'" in result.stdout
