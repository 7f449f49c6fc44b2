"""docs/notebook.md runs as written: its Python cells in order, in one namespace, against a
live server whose cluster a thread plays, with the credentials ``simrun login`` would keep."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from runs.client import Client
from runs.models import Run, RunState

pytestmark = pytest.mark.django_db(transaction=True)

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebook.md"
CELL = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def cells() -> list[str]:
    return CELL.findall(NOTEBOOK.read_text())


def test_the_notebook_has_cells_for_every_call_it_documents():
    code = "\n".join(cells())
    calls = ("submit(", ".wait()", ".frame(", ".output(", ".logs(", ".cancel()", ".resume()")
    for call in (*calls, ".runs(", ".results("):
        assert call in code, call


def test_the_notebook_runs_cell_by_cell(
    live_server, token, config_home, cluster, tmp_path, monkeypatch
):
    monkeypatch.setenv("SIMRUN_URL", live_server.url)
    monkeypatch.setenv("SIMRUN_TOKEN", token)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    try:
        for number, cell in enumerate(cells(), 1):
            try:
                exec(compile(cell, f"{NOTEBOOK.name} cell {number}", "exec"), namespace)
            except Exception as error:
                raise AssertionError(f"cell {number} failed:\n{cell}") from error
    finally:  # as a kernel's end would: no connection left to the live server
        for value in namespace.values():
            if isinstance(value, Client):
                value.close()
    assert namespace["run"].succeeded and namespace["bigger"].state == "succeeded"
    assert len(namespace["table"]) == 12 and namespace["squares"][:3] == [0, 1, 4]
    assert (tmp_path / "squares.csv").read_text().startswith("unit,square")
    curves = namespace["curves"]
    assert len(curves) == 6 and curves["temperature"].is_monotonic_increasing
    assert curves["magnetization"].iloc[0] > curves["magnetization"].iloc[-1]
    assert "tasks.sweep.settings.n" in namespace["problems"]
    assert namespace["failed"].state == "failed"
    slow = Run.objects.get(name="slow", rerun_of=None)
    assert slow.state == RunState.CANCELLED
    assert Run.objects.get(name="slow", rerun_of=slow).resume


INSTALL = re.compile(r"^## Install and log in\n.*?^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)
CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_install_lines_install_simrun_from_what_they_name(tmp_path, monkeypatch):
    """Each ``pip`` line of the page, the checkout's path put in, runs: the wheel is built,
    and each install resolves (``--dry-run``) without simrun from an index, which has none."""
    monkeypatch.chdir(tmp_path)
    lines = [
        line.split("#")[0].replace("/path/to/simrun", str(CHECKOUT)).split()
        for line in INSTALL.search(NOTEBOOK.read_text())[1].splitlines()
        if line.startswith("pip ")
    ]
    assert lines
    for _, command, *args in lines:
        options = ["--no-build-isolation", "--quiet"]  # the checkout's setuptools: no download
        if command == "install":
            options += ["--dry-run", "--ignore-installed"]  # as a fresh environment would
        args = [arg.strip("'") for arg in args]
        done = subprocess.run(
            [sys.executable, "-m", "pip", command, *options, *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"pip {command} {' '.join(args)}:\n{done.stderr[-2000:]}"
    assert [line[1] for line in lines] == ["install", "wheel", "install"]  # both ways named
