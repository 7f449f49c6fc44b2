"""Runs for the tests of the Argo backend: a spec text made into a record and its plans,
as the submission does, without a database."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.tasktypes import task_types
from runs.backends.base import RunRecord, TaskPlan
from runs.planning.planner import ObservedPeak, plan_run
from runs.planning.records import spec_record
from runs.planning.spec_document import parse_spec

IMAGE = "registry.example/simrun-env:0123456789abcdef"


def run_of(
    text: str,
    *,
    run_id: str = "abc123def0",
    image: str = IMAGE,
    reserved_node: str = "",
    observed: Mapping[str, Sequence[ObservedPeak]] | None = None,
    extra_workers: bool = True,
    store: Path = Path("/var/simrun/store"),
) -> tuple[RunRecord, dict[str, TaskPlan]]:
    """The record and the plans of a spec."""
    types = task_types()
    spec = parse_spec(text, types=types)
    plans = plan_run(spec, types=types, observed=observed, extra_workers=extra_workers)
    record = spec_record(
        spec, types, run_id=run_id, image=image, reserved_node=reserved_node, store=store
    )
    return record, plans


def build_context(folder: Path) -> Path:
    """A build context as ``runs.planning.images.write_context`` writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(
        "FROM ghcr.io/simrun/harness:0.1.0\nCOPY requirements.txt /tmp/\n"
        "RUN pip install --no-cache-dir -r /tmp/requirements.txt\n"
    )
    (folder / "requirements.txt").write_text("numpy==2.1.3\n")
    return folder


def evaluate(
    expression: str, last: Mapping[str, str], inputs: Mapping[str, str] | None = None
) -> Any:
    """Evaluate the expr-lang subset simrun writes (``==``, ``in [...]``, ``or``, ``matches``,
    ``c ? a : b``) with the ``lastRetry`` variables and the template's ``inputs.parameters``,
    as Argo would; a variable it does not have is a NameError."""
    python = re.sub(r"([\w.]+) matches '([^']*)'", r"_matches(\1, '\2')", expression)
    python = python.replace("lastRetry.", "last_").replace("inputs.parameters.", "input_")
    if ternary := re.fullmatch(r"(.+?) \? (.+?) : (.+)", python):
        python = f"({ternary[2]} if {ternary[1]} else {ternary[3]})"
    names = {f"last_{key}": value for key, value in last.items()}
    names |= {f"input_{key}": value for key, value in (inputs or {}).items()}
    return eval(python, {"_matches": lambda s, p: re.search(p, s) is not None}, names)  # noqa: S307


def substitute(
    template: str, last: Mapping[str, str], inputs: Mapping[str, str] | None = None
) -> str:
    """Replace every ``{{=expression}}`` as Argo does for an attempt after ``last`` of a
    template called with ``inputs``."""
    return re.sub(r"\{\{=(.+?)\}\}", lambda m: str(evaluate(m[1], last, inputs)), template)
