"""Sources pip cannot install are refused when the run is submitted, with pip's reason at
their index, never accepted to fail in a pod's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.models import Run
from tests.walkthrough import PACKAGE, upload_package, write_walkthrough

pytestmark = pytest.mark.django_db


def run_with(digest: str) -> dict:
    return {"tasks": {"sim": {"command": ["python", "-m", "sim"]}}, "sources": [digest]}


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"sim.py": "print(1)\n"}, "neither 'setup.py' nor 'pyproject.toml' found"),
        ({"pyproject.toml": "[project\nname = 'sim'\n"}, "pyproject.toml (it is no valid TOML"),
        ({"pyproject.toml": b"\xff\xfe[project]"}, "pyproject.toml (it is no valid TOML"),
    ],
    ids=["no project file", "bad TOML", "no text"],
)
def test_a_tree_pip_cannot_install_is_a_400_at_its_index_with_pips_reason(
    owner, owner_client, tmp_path: Path, files: dict, reason: str
):
    tree = tmp_path / "sim-src"
    tree.mkdir()
    for name, data in files.items():
        target = tree / name
        target.write_bytes(data) if isinstance(data, bytes) else target.write_text(data)
    good = write_walkthrough(tmp_path).parent / PACKAGE
    spec = run_with(upload_package(owner, good))
    spec["sources"].append(upload_package(owner, tree))

    response = owner_client.post("/api/runs/", spec, format="json")

    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["sources.1"]
    [problem] = response.json()["sources.1"]
    assert "pip cannot" in problem and reason in problem
    assert not Run.objects.exists()


def test_a_project_with_setup_py_alone_or_a_pyproject_is_accepted(
    owner, owner_client, tmp_path: Path
):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "setup.py").write_text("from setuptools import setup\nsetup(name='legacy')\n")
    package = write_walkthrough(tmp_path).parent / PACKAGE
    spec = run_with(upload_package(owner, legacy))
    spec["sources"].append(upload_package(owner, package))

    response = owner_client.post("/api/runs/", spec, format="json")

    assert response.status_code == 201, response.json()
