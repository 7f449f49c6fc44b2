"""The examples of docs/run-spec.md and docs/resume.md as a user runs them, against a real
``simrun serve`` of one machine: the complete example (and its cluster images, which this
machine refuses by name), the md-sim sweep, and the cache example submitted twice.

The specs are the pages' own code blocks (each starts with a comment naming its file), written
beside a copy of the package the page names from docs/examples/, and submitted with ``simrun
submit FILE --follow``; what a page says they print or produce is read from the page too, so
an edit of a page into something that no longer runs, or no longer does what it says, fails
here.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from runs.cli.client_commands import EXIT_BAD_INPUT
from tests.e2e.service import Service
from tests.e2e.test_shipped_types import simrun_submit
from tests.e2e.test_sweeps_doc import simrun

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs"
RUN_SPEC, RESUME = DOCS / "run-spec.md", DOCS / "resume.md"
BLOCK = re.compile(r"^```yaml\n(?P<text># (?P<path>[-a-z]+\.yaml)\b.*?)^```$", re.M | re.S)


def write_example(doc: Path, name: str, directory: Path) -> Path:
    """The block ``name`` of ``doc`` written into ``directory``, beside a copy of every package
    of docs/examples/ its ``sources`` name; the spec's path."""
    blocks = {m["path"]: m["text"] for m in BLOCK.finditer(doc.read_text())}
    assert name in blocks, f"{doc.name} has no block starting '# {name}'"
    spec = directory / name
    spec.write_text(blocks[name])
    for package in re.findall(r"\./([-a-z]+)", blocks[name]):
        shutil.copytree(
            DOCS / "examples" / package,
            directory / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
    return spec


def said(doc: Path, pattern: str) -> list[str]:
    """What the page quotes after ``pattern`` (a regex ending before a backticked text)."""
    quoted = re.findall(pattern + r"\s*`([^`]+)`", " ".join(doc.read_text().split()))
    assert quoted, f"{doc.name} no longer says {pattern!r}"
    return quoted


def submitted(service: Service, token: str, spec: Path) -> tuple[str, str]:
    """``simrun submit --follow`` of ``spec``, which must exit 0: what it printed and its run."""
    done = simrun_submit(service, token, spec)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, run_id(done.stdout)


def run_id(output: str) -> str:
    """The run ``simrun submit`` says it submitted, named (``ID (NAME):``) or not (``ID:``)."""
    found = re.search(r"submitted run ([a-z0-9]+)\b", output)
    assert found, output
    return found[1]


def log_of(service: Service, run: str, task: str) -> str:
    logs = service.store / "runs" / run / "tasks" / task / "logs"
    return "\n".join(p.read_text() for p in sorted(logs.glob("*.log")))


def test_the_complete_example_of_run_spec_runs_and_draws_its_plot(
    sqlite_service: Service, token: str, tmp_path: Path
) -> None:
    spec = write_example(RUN_SPEC, "ising-sweep.yaml", tmp_path)

    printed, run = submitted(sqlite_service, token, spec)

    assert re.search(rf"run {run} succeeded after", printed), printed
    tasks = sqlite_service.store / "runs" / run / "tasks"
    assert (tasks / "sweep" / "out" / "squares.csv").read_text().startswith("unit,square\n")
    svg = (tasks / "plot" / "out" / "plot.svg").read_text()
    assert re.findall(r'data-column="([a-z]+)"', svg) == ["square", "unit"]
    (printed,) = said(RUN_SPEC, r"into `out/plot.svg`, printing")
    assert printed in log_of(sqlite_service, run, "plot")


def test_the_cluster_images_of_the_complete_example_are_refused_here_by_name(
    sqlite_service: Service, token: str, tmp_path: Path
) -> None:
    spec = write_example(RUN_SPEC, "ising-sweep-cluster.yaml", tmp_path)

    refused = simrun_submit(sqlite_service, token, spec)

    assert refused.returncode == EXIT_BAD_INPUT, refused.stdout + refused.stderr
    assert "submitted run" not in refused.stdout
    (answer,) = said(RUN_SPEC, r"a 400 at `tasks`,")
    assert answer in " ".join(refused.stderr.split()), refused.stderr


def test_the_md_sim_sweep_of_run_spec_computes_its_260_units(
    sqlite_service: Service, token: str, tmp_path: Path
) -> None:
    spec = write_example(RUN_SPEC, "md-sim.yaml", tmp_path)

    _, run = submitted(sqlite_service, token, spec)

    saved = simrun(sqlite_service, token, "results", run, "--csv", str(tmp_path / "md.csv"))
    assert saved.returncode == 0, saved.stderr
    table = pd.read_csv(tmp_path / "md.csv")
    text = " ".join(RUN_SPEC.read_text().split())
    listed = text.split("one row a unit with the columns", 1)[1].split("`steps`.", 1)[0]
    columns = re.findall(r"`(\w+)`", listed)
    assert list(table.columns) == [*dict.fromkeys(columns), "steps"]
    assert len(table) == 260 and (table["exit_code"] == 0).all()
    assert sorted(table["seed"].unique()) == list(range(10))
    # What the page says of energy: near T, as equipartition has it (the mean of 10 seeds).
    for temperature, energy in table.groupby("T")["energy"].mean().items():
        assert abs(energy - temperature) < 0.1 * temperature, (temperature, energy)


def test_the_cache_example_of_resume_runs_only_its_uncached_task_the_second_time(
    sqlite_service: Service, token: str, tmp_path: Path
) -> None:
    spec = write_example(RESUME, "cached.yaml", tmp_path)
    _, earlier = submitted(sqlite_service, token, spec)
    assert "reused from" not in simrun(sqlite_service, token, "show", earlier).stdout

    _, run = submitted(sqlite_service, token, spec)

    shown = simrun(sqlite_service, token, "show", run)
    assert shown.returncode == 0, shown.stderr
    lines = said(RESUME, r"`simrun show` of it says") + said(RESUME, r"\(its task sweep\)` and")
    for line in lines:
        assert line.replace("RUN", earlier) in shown.stdout, shown.stdout
    tasks = sqlite_service.store / "runs" / run / "tasks"
    assert (tasks / "plot" / "out" / "plot.svg").is_file()
    assert "plotted" in log_of(sqlite_service, run, "plot")
