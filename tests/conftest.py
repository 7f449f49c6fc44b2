"""The suite's tiers, by folder, and the fixtures each tier loads.

This file needs nothing the harness does not (pytest alone), so ``pytest tests/harness`` runs
with ``pip install -e .``: the service's fixtures (Django, the Kubernetes stand-in) are plugins
loaded only where pytest-django is installed, as ``pip install -e '.[dev]'`` does.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SERVICE_FIXTURES = ["tests.service_fixtures", "tests.backends.kube_fixtures"]
pytest_plugins = SERVICE_FIXTURES if find_spec("pytest_django") else []

TIERS = {
    "browser": ("browser", "slow"),
    "e2e": ("e2e", "slow"),
    "chaos": ("chaos", "slow"),
}
"""The markers every test of a folder carries, so ``-m "not slow"``, ``-m e2e`` select tiers."""
SHARED_CLUSTER = "backends/test_slurm_"
"""Modules of tests on the machine's two real Slurm clusters, some of which stop and start a
cluster's daemons: the tests of one cluster run on one worker, one after another; those marked
``slurm_noacct`` (the cluster without accounting) on another, beside them."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tiers, before ``-m`` selects; keep the tests of a module
    that share a module-scoped fixture (a ``simrun serve``, a browser's server) on one worker of
    a parallel run (``--dist loadgroup``), so it starts once; then put the modules with a
    slow test first (``slow_modules_first``)."""
    shared = {item.path for item in items if shares_module_fixture(item)}
    for item in items:
        if TESTS not in item.path.parents:
            continue
        for marker in TIERS.get(item.path.relative_to(TESTS).parts[0], ()):
            item.add_marker(marker)
        module = item.path.relative_to(TESTS).as_posix()
        if module.startswith(SHARED_CLUSTER):
            noacct = item.get_closest_marker("slurm_noacct") is not None
            item.add_marker(pytest.mark.xdist_group("slurm-noacct" if noacct else "slurm"))
        elif item.path in shared:
            # The whole module: a test may reach the module's fixture through another one
            # (``request.getfixturevalue``), which its own fixtures do not show.
            item.add_marker(pytest.mark.xdist_group(module))
    slow_modules_first(items)


def slow_modules_first(items: list[pytest.Item]) -> None:
    """Order the modules that hold a slow test before the others, each module's tests in
    their order: a parallel run starts its longest work first and ends on short tests, rather
    than waiting at the end for one long test that started last."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


def shares_module_fixture(item: pytest.Item) -> bool:
    """Whether a test uses a fixture of the suite set up once per module (or per class)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in ("module", "class") and definition.func.__module__.startswith("tests.")
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )
