"""docs/sweeps.md as a user follows it, against a real ``simrun serve``: the script run by hand,
made a package, swept over its 1,000 combinations by ``simrun submit --follow``, its results
table printed, saved and read as a DataFrame, and its plot drawn on the run page.

The files are the document's own code blocks (each starts with a comment naming its file).
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from runs.client import Client
from tests.e2e.service import SIMRUN, Service
from tests.e2e.test_memory_loop import logged_in
from tests.e2e.test_shipped_types import run_id, simrun_submit

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"
BLOCK = re.compile(r"^```[a-z]*\n# (?P<path>relax[-a-z_./]*)\n(?P<body>.*?)^```$", re.M | re.S)
SHOWN = re.compile(r"^\$ cat result.json\n(?P<json>.*)$", re.M)
COLUMNS = [
    "unit",
    "T",
    "h",
    "seed",
    "exit_code",
    "seconds",
    "peak_gib",
    "energy",
    "magnetization",
    "acceptance",
]


def write_doc_files(directory: Path) -> Path:
    """The package and the spec of the walk, as the document shows them; the spec's path."""
    for match in BLOCK.finditer(DOC.read_text()):
        target = directory / match["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"# {match['path']}\n{match['body']}")
    return directory / "relax.yaml"


def simrun(service: Service, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(Path(SIMRUN).parent), "SIMRUN_URL": service.url, "SIMRUN_TOKEN": token}
    return subprocess.run(
        [SIMRUN, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_walk_from_a_script_to_a_1000_point_sweep_and_its_plot(
    sqlite_service: Service, tmp_path: Path
) -> None:
    browser, token = logged_in(sqlite_service, "sweeper")
    spec = write_doc_files(tmp_path)

    # 1. The script by hand, giving what the page shows.
    subprocess.run(
        [sys.executable, "relax-pkg/relax.py", "--temperature", "1.5", "--field", "0.5"]
        + ["--seed", "3", "--out", "result.json"],
        cwd=tmp_path,
        check=True,
        timeout=60,
    )
    shown = SHOWN.search(DOC.read_text())
    assert shown is not None
    assert json.loads((tmp_path / "result.json").read_text()) == json.loads(shown["json"])

    # 4. The sweep, submitted and followed.
    done = simrun_submit(sqlite_service, token, spec)
    assert done.returncode == 0, done.stdout + done.stderr
    run = run_id(done.stdout)
    assert re.search(rf"run {run} succeeded after", done.stdout), done.stdout

    # 5. The results table: printed, saved, as a DataFrame, through the API.
    printed = simrun(sqlite_service, token, "results", run)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].split() == COLUMNS and len(lines) == 2 + 1000
    saved = simrun(sqlite_service, token, "results", run, "--csv", str(tmp_path / "relax.csv"))
    assert saved.returncode == 0, saved.stderr
    table = pd.read_csv(tmp_path / "relax.csv")
    with Client(sqlite_service.url, token) as client:
        pd.testing.assert_frame_equal(client.results(run), table)
    assert list(table.columns) == COLUMNS and table["unit"].tolist() == list(range(1000))
    assert (table["exit_code"] == 0).all() and (table["seconds"] > 0).all()
    assert sorted(table["h"].unique()) == [0.0, 0.25, 0.5, 1.0]
    assert table["T"].nunique() == 50 and table["T"].min() == 0.25 and table["T"].max() == 5.0
    # The physics the page tells of: in a field, the mean over the seeds near the exact
    # magnetization of an infinite ring.
    means = table[table["h"] > 0].groupby(["h", "T"])["magnetization"].mean()
    for (field, temperature), magnetization in means.items():
        b = 1 / temperature
        exact = math.sinh(b * field) / math.sqrt(math.sinh(b * field) ** 2 + math.exp(-4 * b))
        assert abs(magnetization - exact) < 0.3, (field, temperature, magnetization, exact)
    with sqlite_service.client(token) as api:
        page = api.get(f"runs/{run}/tasks/relax/results/", params={"sort": "energy"}).json()
    assert page["count"] == 1000 and page["notes"] == []
    assert page["results"][0]["h"] == 1.0 and page["results"][0]["energy"] < -1.9

    # 6. The plot on the run page: the defaults, then the heat map.
    assert 'id="results-relax"' in browser.get(f"/runs/{run}/").text
    section = browser.get(f"/runs/{run}/tasks/relax/results/")
    assert section.status_code == 200 and 'data-results-count="1000"' in section.text
    svg = section.text[section.text.index("<svg") :]
    assert 'data-x="T"' in svg and 'data-y="energy"' in svg and 'data-colour="h"' in svg
    assert re.findall(r'data-series="([^"]*)"', svg)[:4] == ["0", "0.25", "0.5", "1"]
    heat = browser.get(
        f"/runs/{run}/tasks/relax/results/plot/",
        params={"x": "T", "y": "magnetization", "colour": "h", "kind": "heatmap"},
    )
    assert heat.status_code == 200 and len(re.findall(r'<rect class="cell"', heat.text)) == 200
    download = browser.get(f"/runs/{run}/tasks/relax/results.csv")
    assert pd.read_csv(io.StringIO(download.text)).equals(table)
